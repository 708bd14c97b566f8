package cli

import (
	"bytes"
	"errors"
	"testing"
)

func TestRunFlags(t *testing.T) {
	parse := func(args ...string) (string, error) {
		return RunFlags(&Env{Args: args, Stderr: &bytes.Buffer{}}, SyncerListenDefault)
	}
	if got, err := parse(); err != nil || got != SyncerListenDefault {
		t.Errorf("default = %q, %v", got, err)
	}
	if got, err := parse("--listen", ":9090"); err != nil || got != ":9090" {
		t.Errorf("--listen :9090 = %q, %v", got, err)
	}
	for _, off := range []string{"--listen=", "--listen=off"} {
		if got, err := parse(off); err != nil || got != "" {
			t.Errorf("%s = %q, %v; want disabled", off, got, err)
		}
	}
	var ue *UsageError
	if _, err := parse("extra"); !errors.As(err, &ue) {
		t.Errorf("an extra argument: %v, want a usage error", err)
	}
	t.Setenv(ListenEnv, "0.0.0.0:9464")
	if got, err := parse(); err != nil || got != "0.0.0.0:9464" {
		t.Errorf("from %s = %q, %v", ListenEnv, got, err)
	}
	if got, err := parse("--listen", "127.0.0.1:1"); err != nil || got != "127.0.0.1:1" {
		t.Errorf("the flag wins over the environment: %q, %v", got, err)
	}
	t.Setenv(ListenEnv, "")
	if got, err := parse(); err != nil || got != "" {
		t.Errorf("%s set but empty = %q, %v; want disabled", ListenEnv, got, err)
	}
}
