package taskrunner

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A tool action whose connector panics ends the attempt like a failed
// write to the tool: act returns the panic as an error at once (not
// tried again), and the log has the panic and its stack; the process
// goes on.
func TestToolActionPanicEndsTheAttempt(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	r := &Runner{logger: slog.New(slog.NewTextHandler(&logs, nil))}
	calls := 0
	err := r.act(context.Background(), time.Now().Add(time.Hour), func(context.Context) error {
		calls++
		var byID map[string]int
		byID["task"]++ // a connector's bug: a write to a nil map
		return nil
	})
	var pe *panicked
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "the connector panicked") || !strings.Contains(err.Error(), "nil map") {
		t.Fatalf("act returned %v, want the connector's panic as an error", err)
	}
	if calls != 1 {
		t.Errorf("the action was called %d times, want once (a panic is not tried again)", calls)
	}
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "panic_test.go") {
		t.Errorf("the log does not show the panic with its stack: %s", out)
	}
}
