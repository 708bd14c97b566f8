package connectors_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
)

// widget is a connector that exists only in this test: adding a connector
// is a package that registers its name, the decoder of its block and its
// constructor, and nothing in config knows about it.
type widget struct{ settings *widgetSettings }

// widgetSettings is the widget: block.
type widgetSettings struct {
	// Endpoint is required.
	Endpoint string `yaml:"endpoint"`
	// Count must be positive. Defaults to 3.
	Count int `yaml:"count"`
	// Every defaults to 1m.
	Every time.Duration `yaml:"every"`
}

func (widget) Fetch(context.Context, json.RawMessage, connectors.EmitFunc) (connectors.Result, error) {
	return connectors.Result{}, nil
}

func decodeWidget(src *config.Source) (*widgetSettings, error) {
	s := &widgetSettings{}
	if err := src.DecodeBlock(s); err != nil {
		return nil, err
	}
	var errs []error
	if s.Endpoint == "" {
		errs = append(errs, src.Errorf("widget.endpoint", "is required"))
	}
	if s.Count < 0 {
		errs = append(errs, src.Errorf("widget.count", "must be positive"))
	}
	if s.Count == 0 {
		s.Count = 3
	}
	if s.Every == 0 {
		s.Every = time.Minute
	}
	return s, errors.Join(errs...)
}

func init() {
	connectors.Register("widget", decodeWidget, func(_ *config.Source, s *widgetSettings, _ connectors.Env) (connectors.Connector, error) {
		return widget{settings: s}, nil
	})
	// A second type, so that a source may set the block of another one.
	connectors.Register("gizmo", func(src *config.Source) (struct{}, error) {
		var s struct{}
		return s, src.DecodeBlock(&s)
	}, func(*config.Source, struct{}, connectors.Env) (connectors.Connector, error) { return widget{}, nil })
}

// loadWidget loads a configuration directory whose one source is body.
func loadWidget(t *testing.T, body string) (*config.Config, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, config.SourcesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, config.SourcesDir, "w.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return config.Load(dir)
}

// A connector registered outside config owns its block: config.Load checks
// it through the registry with the connector's own decoder, and every error
// names file, line and key.
func TestRegisteredConnectorOwnsItsBlock(t *testing.T) {
	t.Parallel()
	const head = "name: w\nconnector: widget\n"
	tests := []struct{ name, body, want string }{
		{"unknown key", head + "widget:\n  endpoint: https://x.test\n  colour: red\n",
			"sources/w.yaml:5: widget.colour is not a known key (known: count, endpoint, every)"},
		{"missing required key", head + "widget:\n  count: 2\n",
			"sources/w.yaml:3: widget.endpoint is required"},
		{"wrong type", head + "widget:\n  endpoint: https://x.test\n  count: many\n",
			`sources/w.yaml:5: widget.count must be an integer, not "many"`},
		{"wrong duration", head + "widget:\n  endpoint: https://x.test\n  every: often\n",
			`sources/w.yaml:5: widget.every must be a duration (e.g. 30s, 5m, 1h), not "often"`},
		{"invalid value", head + "widget:\n  endpoint: https://x.test\n  count: -1\n",
			"sources/w.yaml:5: widget.count must be positive"},
		{"no block", head + "every: 1m\n",
			`sources/w.yaml:2: connector "widget" needs a widget: block`},
		{"another connector's block", head + "widget: {endpoint: https://x.test}\ngizmo: {}\n",
			`sources/w.yaml:4: gizmo block is set but the connector is "widget"`},
		{"unknown top-level key", head + "widget: {endpoint: https://x.test}\nwidgt: {}\n",
			"sources/w.yaml:4: widgt is not a known key (known: adaptive, connector, cron, every, fields, follow_redirects, gizmo, jitter, max_delete_fraction, name, prober, rate_limit, stale_after, stop, stuck_after, tasks, timeout, timezone, volatile, watches, webhook, widget)"},
		{"unknown connector", "name: w\nconnector: gadget\ngadget: {}\n",
			`sources/w.yaml:2: connector "gadget" is not known (known: gizmo, prober, widget)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := loadWidget(t, tt.body)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error:\n got: %v\nwant: %s", err, tt.want)
			}
		})
	}
}

// A valid block of a registered connector reaches its constructor decoded,
// with ${ENV} expanded and the connector's defaults applied.
func TestRegisteredConnectorBuilds(t *testing.T) {
	const head = "name: w\nconnector: widget\n"
	t.Setenv("LOOKOUT_TEST_WIDGET_URL", "https://widget.test")
	cfg, err := loadWidget(t, head+"widget:\n  endpoint: ${LOOKOUT_TEST_WIDGET_URL}\n")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connectors.New(cfg.Sources[0], connectors.Env{})
	if err != nil {
		t.Fatal(err)
	}
	got := conn.(widget).settings
	if want := (widgetSettings{Endpoint: "https://widget.test", Count: 3, Every: time.Minute}); *got != want {
		t.Errorf("settings = %+v, want %+v", *got, want)
	}
}

func TestRegisterPanics(t *testing.T) {
	t.Parallel()
	decode := func(*config.Source) (struct{}, error) { return struct{}{}, nil }
	build := func(*config.Source, struct{}, connectors.Env) (connectors.Connector, error) { return widget{}, nil }
	for what, call := range map[string]func(){
		"empty name":      func() { connectors.Register("", decode, build) },
		"nil decoder":     func() { connectors.Register("test-nil", nil, build) },
		"nil constructor": func() { connectors.Register("test-nil", decode, nil) },
		"duplicate":       func() { connectors.Register("widget", decode, build) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register with %s did not panic", what)
				}
			}()
			call()
		}()
	}
}

func TestNewUnknown(t *testing.T) {
	t.Parallel()
	_, err := connectors.New(&config.Source{Name: "x", Connector: "imap", Path: "sources/x.yaml"}, connectors.Env{})
	want := `sources/x.yaml:1: connector "imap" is not known (known: `
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v, want it to start with %q", err, want)
	}
}
