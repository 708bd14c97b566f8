package command

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

func TestCommandSink(t *testing.T) {
	// Not parallel: it sets DATABASE_URL to show the command does not see it.
	dir := t.TempDir()
	script := filepath.Join(dir, "hook.sh")
	write := func(body string) {
		if err := os.WriteFile(script, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "out")
	write(`cat > "` + out + `.json"; printf '%s %s %s' "$LOOKOUT_DEDUPE_KEY" "$LOOKOUT_ATTEMPT" "${DATABASE_URL:-unset}" > "` + out + `.env"`)
	t.Setenv("DATABASE_URL", "postgres://secret")
	s, err := New(Options{Command: []string{script}})
	if err != nil {
		t.Fatal(err)
	}
	n := &notify.Notification{ID: 7, DedupeKey: "src/r1/w/v2-abc", Sink: "s", Source: "src", RecordID: "r1", Watch: "w",
		Kind: notify.KindSingle, Title: "[w] Disk full", Attempt: 1, DeliveryID: "7-1-abc",
		Payload: notify.Payload{NotificationID: 7, DedupeKey: "src/r1/w/v2-abc", Kind: notify.KindSingle}}
	if err := s.Deliver(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	stdin, _ := os.ReadFile(out + ".json")
	if string(stdin) != string(n.JSON()) {
		t.Errorf("stdin = %s, want the payload %s", stdin, n.JSON())
	}
	if env, _ := os.ReadFile(out + ".env"); string(env) != "src/r1/w/v2-abc 1 unset" {
		t.Errorf("environment = %q, want the dedupe key, the attempt and no DATABASE_URL", env)
	}

	write(`echo "mailbox full" >&2; exit 3`)
	err = s.Deliver(context.Background(), n)
	var perm *notify.PermanentError
	if err == nil || errors.As(err, &perm) || !strings.Contains(err.Error(), "status 3") || !strings.Contains(err.Error(), "mailbox full") {
		t.Errorf("failing command = %v, want a retryable error with status and stderr", err)
	}

	// A command that outlives the timeout is killed with its children.
	// Its time is up once it hangs with its child (the pid recorded), not
	// after a 300 ms timer: on a busy machine that timer ended the script
	// before it had started the child. The test's own deadline is only a
	// safety net; the error says the cancel, not it, ended the command.
	pidFile := filepath.Join(dir, "child.pid")
	write(`sleep 60 & echo $! > "` + pidFile + `.tmp" && mv "` + pidFile + `.tmp" "` + pidFile + `"; wait`)
	ctx, cancel := context.WithTimeout(context.Background(), testsignal.Timeout())
	defer cancel()
	testsignal.CancelWhen(ctx, cancel, func() bool { _, err := os.Stat(pidFile); return err == nil })
	err = s.Deliver(ctx, n)
	if err == nil || !strings.Contains(err.Error(), "killed") || !errors.Is(err, context.Canceled) {
		t.Fatalf("hanging command = %v, want killed when its time was up", err)
	}
	raw, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	if pid == 0 {
		t.Fatal("the script did not record its child")
	}
	testsignal.Eventually(t, "the grandchild to die", func() bool {
		return syscall.Kill(pid, 0) != nil
	})

	if _, err := New(Options{Command: []string{filepath.Join(dir, "missing")}}); err == nil {
		t.Error("a missing executable was accepted")
	}
}
