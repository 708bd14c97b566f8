package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// fakeSlack is an incoming webhook that checks messages against Slack's
// documented Block Kit limits and answers like Slack: 400 invalid_blocks
// when a block breaks one, 200 "ok" otherwise. It keeps the last message.
type fakeSlack struct {
	srv *httptest.Server

	mu       sync.Mutex
	last     SlackMessage
	problems []string // what the real Slack would accept but show wrongly
}

func newFakeSlack(t *testing.T) *fakeSlack {
	f := &fakeSlack{}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSlack) serve(w http.ResponseWriter, r *http.Request) {
	var msg SlackMessage
	raw, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(raw, &msg)
	}
	if err != nil || !utf8.Valid(raw) {
		http.Error(w, "invalid_payload", http.StatusBadRequest)
		return
	}
	chars := utf8.RuneCountInString
	var bad []string
	if len(msg.Blocks) > 50 {
		bad = append(bad, fmt.Sprintf("%d blocks (max 50)", len(msg.Blocks)))
	}
	for i, b := range msg.Blocks {
		switch b.Type {
		case "section":
			if b.Text == nil || chars(b.Text.Text) > 3000 {
				bad = append(bad, fmt.Sprintf("blocks[%d].text must be 1-3000 characters", i))
			}
		case "header":
			if b.Text == nil || b.Text.Type != "plain_text" || chars(b.Text.Text) > 150 {
				bad = append(bad, fmt.Sprintf("blocks[%d].text must be plain_text of 1-150 characters", i))
			}
		case "context":
			if len(b.Elements) == 0 || len(b.Elements) > 10 {
				bad = append(bad, fmt.Sprintf("blocks[%d].elements must hold 1-10 elements", i))
			}
			for j, e := range b.Elements {
				if chars(e.Text) > 3000 {
					bad = append(bad, fmt.Sprintf("blocks[%d].elements[%d].text must be at most 3000 characters", i, j))
				}
			}
		default:
			bad = append(bad, fmt.Sprintf("blocks[%d].type %q is not known", i, b.Type))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = msg
	if chars(msg.Text) > 40000 {
		f.problems = append(f.problems, "text over 40,000 characters: Slack truncates it")
	}
	// An unescaped < in mrkdwn is a link or a mention (<!channel>).
	if strings.ContainsAny(msg.Text, "<>") {
		f.problems = append(f.problems, fmt.Sprintf("text %q holds an unescaped < or >", msg.Text))
	}
	if len(bad) > 0 {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "invalid_blocks: "+strings.Join(bad, "; "))
		return
	}
	_, _ = io.WriteString(w, "ok")
}

func (f *fakeSlack) deliver(t *testing.T, n *Notification) (SlackMessage, error) {
	t.Helper()
	s, err := NewSlackSink(SlackOptions{URL: f.srv.URL + "/services/T/B/X"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.client.CloseIdleConnections()
	err = s.Deliver(context.Background(), n)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.problems {
		t.Errorf("slack: %s", p)
	}
	f.problems = nil
	return f.last, err
}

// TestSlackLongMessagesFitTheLimits: bodies, titles and links of every
// length and script reach Slack within its limits, cut by characters.
func TestSlackLongMessagesFitTheLimits(t *testing.T) {
	t.Parallel()
	long := func(s string, n int) string { return strings.Repeat(s, n) }
	tests := []struct {
		name      string
		title     string
		body      string
		url       string
		wantBody  string // the body block
		wantTitle string // the title block; "" skips the check
	}{
		{name: "ascii fits", body: long("a", 3000), wantBody: long("a", 3000)},
		{name: "ascii", body: long("a", 5000), wantBody: long("a", 2999) + "…"},
		{name: "ascii one over", body: long("a", 3001), wantBody: long("a", 2999) + "…"},
		{name: "accented", body: long("é", 5000), wantBody: long("é", 2999) + "…"},
		{name: "accented fits", body: long("é", 3000), wantBody: long("é", 3000)},
		{name: "emoji", body: long("🚀", 5000), wantBody: long("🚀", 2999) + "…"},
		{name: "flags and joiners", body: long("👩‍💻", 2000), wantBody: string([]rune(long("👩‍💻", 2000))[:2999]) + "…"},
		{name: "escapes are not cut in two", body: long("&", 2000), wantBody: long("&amp;", 599) + "…"},
		{name: "escapes fit", body: long("<", 750), wantBody: long("&lt;", 750)},
		{name: "long title", title: long("T", 5000), body: "b", wantBody: "b",
			wantTitle: "*<https://example.com/r1|" + long("T", 3000-len("*<https://example.com/r1|>*")-1) + "…>*"},
		{name: "long url drops the link", title: "short", url: "https://example.com/" + long("x", 3000), body: "b", wantBody: "b",
			wantTitle: "*short*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			slack := newFakeSlack(t)
			n := testNotification()
			n.Body = tt.body
			if tt.title != "" {
				n.Title = tt.title
			}
			if tt.url != "" {
				n.Payload.Record.URL = tt.url
			}
			msg, err := slack.deliver(t, n)
			if err != nil {
				t.Fatalf("Deliver = %v, want Slack to accept the message", err)
			}
			if len(msg.Blocks) != 3 {
				t.Fatalf("blocks = %d, want title, body and context", len(msg.Blocks))
			}
			if got := msg.Blocks[1].Text.Text; got != tt.wantBody {
				t.Errorf("body block: %d characters ending %q, want %d ending %q",
					utf8.RuneCountInString(got), tail(got), utf8.RuneCountInString(tt.wantBody), tail(tt.wantBody))
			}
			if got := msg.Blocks[0].Text.Text; tt.wantTitle != "" && got != tt.wantTitle {
				t.Errorf("title block: %d characters %q…%q, want %d", utf8.RuneCountInString(got),
					string([]rune(got)[:min(30, utf8.RuneCountInString(got))]), tail(got), utf8.RuneCountInString(tt.wantTitle))
			}
		})
	}
}

func tail(s string) string {
	r := []rune(s)
	return string(r[max(0, len(r)-5):])
}

// TestSlackFallbackTextIsEscaped: the top-level text is mrkdwn as well; a
// record title must not mention the channel or smuggle a link.
func TestSlackFallbackTextIsEscaped(t *testing.T) {
	t.Parallel()
	slack := newFakeSlack(t)
	n := testNotification()
	n.Title = "<!channel> & <http://evil.example|click here>"
	msg, err := slack.deliver(t, n)
	if err != nil {
		t.Fatal(err)
	}
	if want := "[high] &lt;!channel&gt; &amp; &lt;http://evil.example|click here&gt;"; msg.Text != want {
		t.Errorf("text = %q, want %q", msg.Text, want)
	}
	if got := msg.Blocks[0].Text.Text; got != "*<https://example.com/r1|&lt;!channel&gt; &amp; &lt;http://evil.example|click here&gt;>*" {
		t.Errorf("title block = %q", got)
	}
	n.Title = strings.Repeat("&", 20000)
	if msg, err = slack.deliver(t, n); err != nil {
		t.Fatal(err)
	}
	if c := utf8.RuneCountInString(msg.Text); c > 40000 || !strings.HasSuffix(msg.Text, "&amp;…") {
		t.Errorf("long text: %d characters ending %q, want at most 40000 ending in a whole escape and …", c, tail(msg.Text))
	}
}

func TestSlackFakeRejectsWhatSlackRejects(t *testing.T) {
	t.Parallel()
	slack := newFakeSlack(t)
	body, _ := json.Marshal(SlackMessage{Text: "x", Blocks: []SlackBlock{{Type: "section", Text: &SlackText{Type: "mrkdwn", Text: strings.Repeat("a", 3001)}}}})
	s, err := NewSlackSink(SlackOptions{URL: slack.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer s.client.CloseIdleConnections()
	err = post(context.Background(), s.client, nil, s.opts.URL, http.Header{"Content-Type": {"application/json"}}, body, "slack")
	var perm *PermanentError
	if !errors.As(err, &perm) || !strings.Contains(err.Error(), "invalid_blocks") {
		t.Errorf("a 3001-character section = %v, want a permanent invalid_blocks", err)
	}
}

func TestSnippetKeepsUTF8Valid(t *testing.T) {
	t.Parallel()
	for _, s := range []string{strings.Repeat("é", 300), strings.Repeat("🚀", 300), "a" + strings.Repeat("€", 300)} {
		for n := 1; n < 20; n++ {
			got := Snippet(s, n)
			if !utf8.ValidString(got) || len(got) > n+len("…") || !strings.HasSuffix(got, "…") {
				t.Fatalf("Snippet(%q…, %d) = %q", s[:8], n, got)
			}
		}
	}
}
