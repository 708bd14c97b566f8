package redact

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"strings"
	"testing"
)

func TestRedactor(t *testing.T) {
	t.Parallel()
	r := New("abc", "s3cr3t/value+1", "s3cr3t", "", "token-123")
	for _, tc := range []struct{ in, want string }{
		{"key abc is short", "key abc is short"}, // < MinLen: left alone
		{"got s3cr3t/value+1 and s3cr3t", "got [REDACTED] and [REDACTED]"},
		{"in a query: ?k=" + url.QueryEscape("s3cr3t/value+1"), "in a query: ?k=[REDACTED]"},
		{`{"token":"token-123"}`, `{"token":"[REDACTED]"}`},
		{"nothing here", "nothing here"},
		{"cut short: token-1…", "cut short: [REDACTED]…"},
		{"cut at the end: s3cr3t/va", "cut at the end: [REDACTED]"},
		{"toke is too short a start: tok", "toke is too short a start: tok"},
	} {
		if got := r.String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	var none *Redactor
	if got := none.String("token-123"); got != "token-123" || New("ab", "") != nil {
		t.Errorf("a nil redactor changed the text, or short values made one")
	}
	err := r.Error(fmt.Errorf("read token-123: %w", fs.ErrNotExist))
	if err.Error() != "read [REDACTED]: file does not exist" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Error: %q, Is ErrNotExist %t", err, errors.Is(err, fs.ErrNotExist))
	}
	if r.Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
}

type stringer struct{}

func (stringer) String() string { return "stringer token-123" }

func TestHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(NewHandler(slog.NewJSONHandler(&buf, nil), New("token-123"))).With("base", "with token-123")
	logger.WithGroup("g").Info("message token-123", "s", "token-123", "err", errors.New("echo token-123"),
		"n", 42, "list", []string{"a", "token-123"}, "str", stringer{}, slog.Group("inner", "x", "token-123"))
	out := buf.String()
	if strings.Contains(out, "token-123") {
		t.Fatalf("secret logged: %s", out)
	}
	for _, want := range []string{`"msg":"message [REDACTED]"`, `"base":"with [REDACTED]"`, `"s":"[REDACTED]"`, `"err":"echo [REDACTED]"`,
		`"n":42`, `"list":["a","[REDACTED]"]`, `"str":"stringer [REDACTED]"`, `"inner":{"x":"[REDACTED]"}`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %s lacks %s", out, want)
		}
	}
	h := slog.NewTextHandler(&buf, nil)
	if NewHandler(h, nil) != slog.Handler(h) {
		t.Error("a nil redactor should not wrap")
	}
}

func TestRedactorAdd(t *testing.T) {
	t.Parallel()
	r := NewGrowable()
	if r == nil || r.Len() != 0 || r.String("ghp_secret-token") != "ghp_secret-token" {
		t.Fatalf("an empty growable redactor: %v, Len %d", r, r.Len())
	}
	// A logger made before the value is known hides it once it is added.
	var buf bytes.Buffer
	logger := slog.New(NewHandler(slog.NewTextHandler(&buf, nil), r))
	r.Add("ghp_secret-token", "ab")
	logger.Info("fetch", "error", errors.New("401 for token ghp_secret-token"))
	if strings.Contains(buf.String(), "ghp_secret-token") || !strings.Contains(buf.String(), Mask) {
		t.Errorf("log after Add: %s", buf.String())
	}
	if got := r.String("ab ghp_secret-token"); got != "ab "+Mask {
		t.Errorf("String = %q", got)
	}
	n := r.Len()
	r.Add("ghp_secret-token")
	if r.Len() != n {
		t.Errorf("adding a known value again grew the set: %d -> %d", n, r.Len())
	}
	var none *Redactor
	none.Add("ghp_secret-token") // no panic
}
