package connectors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Actor is implemented, beside Connector, by connectors that can act on
// the records they read: a task in a tool people look at (a Notion card,
// a GitHub issue) that lookout claims, has executed once and moves to a
// terminal state. The claim that counts is the one in PostgreSQL (the
// caller's task_runs row, taken first); the Actor writes its visible copy
// into the tool so that people see who works on what, and reads it back.
//
// Every method acts on one record, named by its record id (the id the
// connector's items carry: a Notion page id, a GitHub issue number), with
// the Claim the caller holds. ctx bounds the call, which makes a few
// requests (read what the write needs, write, read back); the caller gives
// it a deadline. Requests go through Env.HTTP, so they spend the source's
// and the host's budgets like a Fetch does.
//
// Idempotency: each method sets the task to a state (it does not toggle
// or increment), so calling it again with the same arguments leaves the
// task as one call would. A retry means calling the same method again with
// the same record id and Claim, after a *RetryLaterError at its RetryAt or
// after an error whose write may or may not have landed.
//
// Write only over what lookout wrote. What a person set in the tool is
// never overwritten: every method reads the task right before it writes,
// and writes only when the task shows what lookout itself left there —
// Claim only over the todo status, Complete, Fail and Release only over
// c's own claim (the in-progress status under c's run). Otherwise it
// writes nothing and returns an error wrapping ErrMoved; a task that
// already shows the method's state under c's run (a retried write that
// had landed) is a success. Tools have no compare-and-set, so a person's
// edit that lands between that read and the write is still overwritten:
// the method sends the write right after the read, without waiting for a
// rate limit longer than ActWaitLimit (it returns a *RetryLaterError
// instead, and the caller tries the whole method again), which keeps that
// window to one round trip plus at most ActWaitLimit. The caller calls
// Confirm after Claim to catch an edit in it before executing.
//
// Errors are wrapped with context; these tell the caller what to do:
//
//   - ErrUnauthorized: the credentials were refused (401/403); stop acting
//     on the source until an operator fixes its configuration.
//
//   - *RetryLaterError: the tool asked to wait (429, 529, 5xx with
//     Retry-After); call again, with the same arguments, at RetryAt.
//
//   - *ValidationError: the tool refuses a value lookout was configured to
//     write (a status that is not one of the property's options, a
//     property of the wrong type); retrying cannot help. The error names
//     the property, the value and what the tool allows; the caller records
//     it as the run's error and leaves the task for a person.
//
//   - ErrNotFound: the record no longer exists or is no longer visible to
//     the credentials (deleted, archived, moved out of the database).
//
//   - ErrMoved: the task does not show what lookout last wrote there (a
//     person moved it, another claim replaced it); nothing was written.
//     The caller leaves the task as it is: a claim is not executed, a
//     terminal write is given up.
//
// Any other error (a network failure, an unexpected status) may be retried.
type Actor interface {
	// Claim writes the visible claim — the in-progress status, who claimed
	// it, when, until when and the run id — when the task still shows the
	// todo status (ErrMoved otherwise).
	Claim(ctx context.Context, id string, c Claim) error
	// Confirm reads the task back and reports whether it still shows c:
	// the in-progress status and c's run (where the tool shows one). It is
	// false, with a nil error, when a person moved the task, another claim
	// replaced it, or the task was deleted or archived; the caller then
	// records the run as lost and does not execute it.
	Confirm(ctx context.Context, id string, c Claim) (bool, error)
	// Complete moves the task from c's claim to the complete status, with
	// o.At as its completion time and no last error.
	Complete(ctx context.Context, id string, c Claim, o Outcome) error
	// Fail moves the task from c's claim to the failed status with o.Error
	// as its last error and o.RetryCount as its retry count: no more
	// attempts.
	Fail(ctx context.Context, id string, c Claim, o Outcome) error
	// Release gives the task back from c's claim: the todo status, the
	// claim cleared,
	// o.Error as the last error and o.RetryCount as the retry count, so
	// that a later run (or a person) takes it again. It is what a
	// recoverable failure and an expired claim do.
	Release(ctx context.Context, id string, c Claim, o Outcome) error
}

// Claim is the visible claim on a task.
type Claim struct {
	// RunID identifies the run that holds the claim (the caller's run id);
	// Confirm and the terminal writes check it where the tool shows it.
	RunID string
	// By names the claimer (a worker or deployment name).
	By string
	// At is when the claim was taken; ExpiresAt when it lapses unless the
	// run finishes first.
	At, ExpiresAt time.Time
}

// Outcome is what a terminal write or a release records.
type Outcome struct {
	// At is when it happened: the completion time for Complete.
	At time.Time
	// Error is the last error to show; "" clears it.
	Error string
	// RetryCount is the number of failed attempts so far.
	RetryCount int
}

// ErrNotFound says the record acted on does not exist or is not visible.
var ErrNotFound = errors.New("not found")

// ErrMoved says an Actor wrote nothing because the task does not show what
// lookout last wrote there: a person moved it.
var ErrMoved = errors.New("the task was moved in the tool")

// ActWaitLimit is the longest an Actor's write waits for a rate limit
// after the read it is conditional on (see Actor); a longer wait is a
// *RetryLaterError, and the caller tries the read and the write again.
const ActWaitLimit = time.Second

type waitLimitKey struct{}

// WithWaitLimit returns ctx with d as the longest a request made with it
// may wait for a rate limit before it is sent: the HTTP transport the
// connector is given (the syncer's) returns a *RetryLaterError instead of
// waiting longer, and sends nothing.
func WithWaitLimit(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, waitLimitKey{}, d)
}

// WaitLimit returns the wait limit WithWaitLimit put in ctx.
func WaitLimit(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(waitLimitKey{}).(time.Duration)
	return d, ok
}

// ValidationError is a value the tool refuses (or, from its schema, would
// refuse): retrying cannot help, the configuration or the tool must change.
type ValidationError struct {
	// Property names the field or property written ("Status").
	Property string
	// Value is the value refused, when there is one.
	Value string
	// Allowed lists the values the property accepts (its options), when
	// the tool has such a list.
	Allowed []string
	// Reason says what is wrong when it is not a missing option (the
	// tool's own message, or "is a number property; lookout writes text").
	Reason string
}

func (e *ValidationError) Error() string {
	switch {
	case e.Reason != "":
		return fmt.Sprintf("property %q: %s", e.Property, e.Reason)
	case len(e.Allowed) == 0:
		return fmt.Sprintf("property %q has no option %q (it has no options)", e.Property, e.Value)
	}
	return fmt.Sprintf("property %q has no option %q (options: %s)", e.Property, e.Value, strings.Join(e.Allowed, ", "))
}

// TaskContent is implemented by an Actor whose writes show in the records
// its connector reads beyond the record's status and updated_at (Notion's
// claim properties under extra.properties, GitHub's status labels and
// claim comments). StripTask deletes from fields — a record's fields as
// normalize.Record.Fields returns them, a copy the caller owns, nested
// maps included — what the Actor's own writes set, so that what is left
// is what the task says. The task runner hashes that into the task's
// version: a retry after lookout released the task (RetryCount, LastError
// changed) is the same version with the same idempotency key, while a
// person editing the task makes a new one.
type TaskContent interface {
	StripTask(fields map[string]any)
}

// ActLock lets one task action of a connector at a time make its requests,
// so that a write follows the read it is conditional on within
// ActWaitLimit even when many tasks are acted on at once: the actions of
// one source queue here instead of in the rate limits, where a write
// behind the others' reads would wait longer than ActWaitLimit each time.
// Its zero value is unlocked.
type ActLock struct {
	once sync.Once
	ch   chan struct{}
}

// Lock waits for the lock or for ctx to end; unlock releases it.
func (l *ActLock) Lock(ctx context.Context) (unlock func(), err error) {
	l.once.Do(func() { l.ch = make(chan struct{}, 1) })
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the source's other task actions: %w", ctx.Err())
	}
}
