package connectors_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
)

type nop struct{}

func (nop) Fetch(context.Context, json.RawMessage, connectors.EmitFunc) (connectors.Result, error) {
	return connectors.Result{}, nil
}

func TestRegisterPanics(t *testing.T) {
	f := func(*config.Source, connectors.Env) (connectors.Connector, error) { return nop{}, nil }
	connectors.Register("test-nop", f)
	for name, call := range map[string]func(){
		"empty name": func() { connectors.Register("", f) },
		"nil":        func() { connectors.Register("test-nil", nil) },
		"duplicate":  func() { connectors.Register("test-nop", f) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register with %s did not panic", name)
				}
			}()
			call()
		}()
	}
}

func TestNewUnknown(t *testing.T) {
	_, err := connectors.New(&config.Source{Name: "x", Connector: "imap", Path: "sources/x.yaml"}, connectors.Env{})
	if err == nil {
		t.Fatal("want an error")
	}
	want := `sources/x.yaml:1: connector "imap" is not known (known: `
	if got := err.Error(); len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("error = %q", got)
	}
}
