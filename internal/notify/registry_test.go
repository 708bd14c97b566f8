package notify_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/notify"
	// Links every sink type into this package's test binary, so that the
	// tests of package notify load lookout.yaml as the evaluator does.
	_ "github.com/lookout-dev/lookout/internal/notify/all"
)

// pagerSettings are the keys of the "pager" sink type these tests add,
// as a new sink type's package would.
type pagerSettings struct {
	RoutingKey string `yaml:"routing_key"`
	Severity   string `yaml:"severity"`
}

type pagerSink struct {
	settings pagerSettings
	got      []*notify.Notification
}

func (p *pagerSink) Deliver(_ context.Context, n *notify.Notification) error {
	p.got = append(p.got, n)
	return nil
}

// One Register call is all a sink type needs: its keys are checked by
// config.Load and its sinks built by BuildSinks.
func init() {
	notify.Register("pager", func(s *config.Sink) (pagerSettings, error) {
		var st pagerSettings
		if err := s.DecodeBlock(&st); err != nil {
			return st, err
		}
		if st.RoutingKey == "" {
			return st, s.Errorf("routing_key", "is required for a pager sink")
		}
		if st.Severity == "" {
			st.Severity = "info"
		}
		return st, nil
	}, func(_ *config.Sink, st pagerSettings, _ notify.Env) (notify.Sink, error) {
		return &pagerSink{settings: st}, nil
	})
}

func loadSinks(t *testing.T, global string) (*config.Config, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, config.SourcesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, config.GlobalFile), []byte(global), 0o644); err != nil {
		t.Fatal(err)
	}
	return config.Load(dir)
}

// TestRegisteredSinkType: a sink type registered from outside notify is
// loaded from lookout.yaml with its keys and defaults, built by
// BuildSinks, and delivers.
func TestRegisteredSinkType(t *testing.T) {
	t.Parallel()
	cfg, err := loadSinks(t, "sinks:\n  oncall:\n    type: pager\n    routing_key: abc\n    max_attempts: 3\n")
	if err != nil {
		t.Fatal(err)
	}
	sinks, err := notify.BuildSinks(&cfg.Global, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := sinks["oncall"].(*pagerSink)
	if !ok {
		t.Fatalf("oncall built as %T", sinks["oncall"])
	}
	if p.settings != (pagerSettings{RoutingKey: "abc", Severity: "info"}) {
		t.Errorf("settings = %+v", p.settings)
	}
	if got := cfg.Global.Sinks["oncall"].MaxAttempts; got != 3 {
		t.Errorf("max_attempts = %d", got)
	}
	if err := p.Deliver(context.Background(), &notify.Notification{ID: 1}); err != nil || len(p.got) != 1 {
		t.Errorf("deliver: %v, %d", err, len(p.got))
	}
}

// TestSinkTypeKeys: each type's keys are checked by its own decoder, at
// their line, and a key another type reads says which.
func TestSinkTypeKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, global, want string
	}{
		{"key of another type", "sinks:\n  hook:\n    type: webhook\n    url: https://example.com\n    routing_key: abc\n",
			"lookout.yaml:5: sinks.hook.routing_key is not used by a webhook sink (only by pager)"},
		{"key of several types", "sinks:\n  oncall:\n    type: pager\n    routing_key: abc\n    url: https://example.com\n",
			"lookout.yaml:5: sinks.oncall.url is not used by a pager sink (only by slack, url, webhook)"},
		{"unknown key", "sinks:\n  oncall:\n    type: pager\n    routing_key: abc\n    severty: high\n",
			"lookout.yaml:5: sinks.oncall.severty is not a known key (known: body, concurrency, max_attempts, routing_key, severity, timeout, title, type)"},
		{"required key of the type", "sinks:\n  oncall:\n    type: pager\n    severity: high\n",
			"lookout.yaml:2: sinks.oncall.routing_key is required for a pager sink"},
		{"wrong value type", "sinks:\n  oncall:\n    type: pager\n    routing_key: [a, b]\n",
			"lookout.yaml:4: sinks.oncall.routing_key must be a string, not a list"},
		{"type names the registered ones", "sinks:\n  oncall:\n    routing_key: abc\n",
			"lookout.yaml:2: sinks.oncall.type is required (one of command, email, log, pager, slack, url, webhook)"},
		{"unknown type", "sinks:\n  oncall:\n    type: pagr\n",
			`lookout.yaml:3: sinks.oncall.type "pagr" is not a sink type (known: command, email, log, pager, slack, url, webhook)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := loadSinks(t, tt.global)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load error:\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}

// TestRegisterRefuses: a sink type without a name, a decoder or a
// constructor, or registered twice, is a programming error.
func TestRegisterRefuses(t *testing.T) {
	t.Parallel()
	decode := func(*config.Sink) (struct{}, error) { return struct{}{}, nil }
	build := func(*config.Sink, struct{}, notify.Env) (notify.Sink, error) { return nil, errors.New("unused") }
	for name, f := range map[string]func(){
		"empty name":  func() { notify.Register("", decode, build) },
		"nil decoder": func() { notify.Register[struct{}]("x-nil-decoder", nil, build) },
		"nil build":   func() { notify.Register[struct{}]("x-nil-build", decode, nil) },
		"twice":       func() { notify.Register("webhook", decode, build) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register did not panic", name)
				}
			}()
			f()
		}()
	}
}
