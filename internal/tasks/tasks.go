// Package tasks owns the task_runs table: the claims and executions of
// task watches (docs/tasks.md), and task_reviews, the reviews of their
// results (review.go, docs/tasks.md#review). A task version — a record's content
// without what lookout writes back, for one task watch — has one row,
// keyed by its idempotency key (UNIQUE): claiming it is an INSERT … ON
// CONFLICT DO NOTHING, and a retry is the next attempt of the same row,
// taken by a conditional UPDATE. Either way two replicas, or a pass
// repeated after a crash, never both claim it; and the one statement that
// lets an executor start (Start) checks that the attempt is still
// confirming and its claim unexpired.
//
// The package does no I/O beyond PostgreSQL and links no connector: the
// syncer's task runner (internal/taskrunner) drives the flow, and the
// api's result callback (Report) stores an agent's report. Named queries
// are in queries.go.
package tasks

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lookout-dev/lookout/internal/db"
)

// Statuses of a task run.
const (
	StatusClaimed    = "claimed"    // claimed in PostgreSQL; the visible claim is being written
	StatusConfirming = "confirming" // the visible claim was written; reading it back
	StatusRunning    = "running"    // the executor runs (or, after a 202, the agent works)
	StatusReviewing  = "reviewing"  // the executor succeeded; the evaluator reviews the result (task_reviews)
	StatusCompleted  = "completed"  // done; the tool shows complete
	StatusFailed     = "failed"     // no more attempts; the tool shows failed
	StatusReleased   = "released"   // a recoverable failure: back to todo, retried after retry_at
	StatusLost       = "lost"       // the visible claim did not stick (a person moved the card): not executed
	StatusExpired    = "expired"    // the claim expired before the attempt ended (crash, kill)
)

// Active are the statuses of an attempt in progress.
var Active = []string{StatusClaimed, StatusConfirming, StatusRunning}

// Tool actions: the write the tool still needs to show a run's state.
const (
	ToolClaim    = "claim"
	ToolComplete = "complete"
	ToolFail     = "fail"
	ToolRelease  = "release"
)

// Querier runs statements: a *pgxpool.Pool or a pgx.Tx.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Beginner starts transactions: a *pgxpool.Pool.
type Beginner interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Run is one row of task_runs: a task version and its current attempt.
type Run struct {
	ID             int64
	Source, Task   string
	RecordID       string
	RecordVersion  int
	ContentVersion string
	IdempotencyKey string
	Title          string
	Attempt        int
	// RunID is the attempt's visible run id, run-<id>.<attempt>.
	RunID     string
	SyncRunID *int64
	Status    string
	ClaimedBy string
	ClaimedAt time.Time
	// ClaimExpiresAt is when the claim lapses.
	ClaimExpiresAt        time.Time
	StartedAt, FinishedAt *time.Time
	// Executions counts executor starts over every attempt; Failures the
	// failed executions (the RetryCount the tool shows).
	Executions, Failures int
	// RetryAt is when a released, lost or expired task may be claimed
	// again; nil when it may not.
	RetryAt    *time.Time
	Executor   string
	ExitCode   *int
	Result     json.RawMessage
	StderrTail string
	LastError  string
	// ToolAction is the write the tool still needs ("" when it shows the
	// run's state); ToolError the last failed write.
	ToolAction, ToolError string
	ReportedAt            *time.Time
	// History lists the earlier attempts.
	History json.RawMessage
	// Report is the agent's report, read by Reported.
	Report json.RawMessage
	// CorrectionCount is how often a review sent the task back.
	CorrectionCount int
}

// Active reports whether the attempt is in progress.
func (r *Run) Active() bool {
	return r.Status == StatusClaimed || r.Status == StatusConfirming || r.Status == StatusRunning
}

// Claimable reports whether another attempt may claim the run at now.
func (r *Run) Claimable(now time.Time) bool {
	switch r.Status {
	case StatusReleased, StatusLost, StatusExpired:
		return r.RetryAt != nil && !r.RetryAt.After(now)
	}
	return false
}

// Rerunnable reports whether the finished run may be taken again when the
// mirror shows its task eligible at recordVersion: it completed or failed,
// the tool shows it (no write due), and the record changed since the last
// claim. Lookout leaves a finished task in the complete or failed status,
// so a task eligible again (the todo status) at a newer version is one a
// person moved back: they ask for it again (docs/tasks.md).
func (r *Run) Rerunnable(recordVersion int) bool {
	return (r.Status == StatusCompleted || r.Status == StatusFailed) && r.ToolAction == "" && recordVersion > r.RecordVersion
}

func scanRun(row pgx.Row, extra ...any) (*Run, error) {
	r := &Run{}
	var result, history []byte
	dest := []any{&r.ID, &r.Source, &r.Task, &r.RecordID, &r.RecordVersion, &r.ContentVersion, &r.IdempotencyKey, &r.Title,
		&r.Attempt, &r.RunID, &r.SyncRunID, &r.Status, &r.ClaimedBy, &r.ClaimedAt, &r.ClaimExpiresAt, &r.StartedAt, &r.FinishedAt,
		&r.Executions, &r.Failures, &r.RetryAt, &r.Executor, &r.ExitCode, &result, &r.StderrTail, &r.LastError,
		&r.ToolAction, &r.ToolError, &r.ReportedAt, &history, &r.CorrectionCount}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	r.Result, r.History = result, history
	return r, nil
}

func collect(rows pgx.Rows, err error) ([]*Run, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Lookup returns the runs of the given idempotency keys, by key.
func Lookup(ctx context.Context, q Querier, keys []string) (map[string]*Run, error) {
	runs, err := collect(q.Query(ctx, queryLookup, keys))
	if err != nil {
		return nil, fmt.Errorf("look up task runs: %w", err)
	}
	out := make(map[string]*Run, len(runs))
	for _, r := range runs {
		out[r.IdempotencyKey] = r
	}
	return out, nil
}

// Claim is what a claim records.
type Claim struct {
	Source, Task, RecordID string
	RecordVersion          int
	ContentVersion         string
	IdempotencyKey         string
	Title                  string
	// SyncRunID is the source run whose mirror made the task eligible.
	SyncRunID int64
	By        string
	At        time.Time
	Lease     time.Duration
	Executor  string
}

// ClaimTask claims c's task version: a new row when the version has none,
// else the next attempt when the last one may be retried at c.At. It
// returns nil (and no error) when someone else holds or finished it.
func ClaimTask(ctx context.Context, q Querier, c Claim) (*Run, error) {
	var sync any
	if c.SyncRunID != 0 {
		sync = c.SyncRunID
	}
	r, err := scanRun(q.QueryRow(ctx, queryClaimNew, c.Source, c.Task, c.RecordID, c.RecordVersion, c.ContentVersion,
		c.IdempotencyKey, c.Title, sync, c.By, c.At, c.Lease, c.Executor))
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("claim task %s: %w", c.IdempotencyKey, err)
	}
	r, err = scanRun(q.QueryRow(ctx, queryReclaim, c.IdempotencyKey, c.RecordVersion, c.Title, sync, c.By, c.At, c.Lease, c.Source))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("claim the next attempt of task %s: %w", c.IdempotencyKey, err)
	}
	return r, nil
}

// RerunTask takes c's finished task version again (see Run.Rerunnable):
// the next attempt, failures reset. It returns nil (and no error) when
// someone else took it first or it is not rerunnable at c.RecordVersion.
func RerunTask(ctx context.Context, q Querier, c Claim) (*Run, error) {
	var sync any
	if c.SyncRunID != 0 {
		sync = c.SyncRunID
	}
	r, err := scanRun(q.QueryRow(ctx, queryRerun, c.IdempotencyKey, c.RecordVersion, c.Title, sync, c.By, c.At, c.Lease, c.Source))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("claim task %s again: %w", c.IdempotencyKey, err)
	}
	return r, nil
}

// Confirming records that the visible claim of r's attempt was written.
func Confirming(ctx context.Context, q Querier, r *Run, now time.Time) (bool, error) {
	tag, err := q.Exec(ctx, queryConfirming, r.ID, r.Attempt, now)
	if err != nil {
		return false, fmt.Errorf("task run %d: record the visible claim: %w", r.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Start moves r's confirmed attempt to running, unless its claim expired
// or another state replaced it: only when it reports true may the
// executor start. tokenHash is the hash of the attempt's report token
// (webhook executions; "" for none).
func Start(ctx context.Context, q Querier, r *Run, now time.Time, tokenHash string) (bool, error) {
	var executions int
	err := q.QueryRow(ctx, queryStart, r.ID, r.Attempt, now, nullText(tokenHash)).Scan(&executions)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("task run %d: start: %w", r.ID, err)
	}
	r.Status, r.Executions, r.StartedAt = StatusRunning, executions, &now
	return true, nil
}

// End is how an attempt ends.
type End struct {
	// Status is completed, failed, released, lost or expired.
	Status string
	At     time.Time
	// ExitCode, Result and StderrTail are what the executor returned.
	ExitCode   *int
	Result     json.RawMessage
	StderrTail string
	// Error is the last error ("" clears it).
	Error string
	// Failures is the run's failure count after this attempt.
	Failures int
	// RetryAt is when another attempt may claim it; nil for none.
	RetryAt *time.Time
	// ToolAction is the write the tool needs ("" for none), due at ToolDue.
	ToolAction string
	ToolDue    time.Time
	// Correction counts one more correction (a review sent the task back).
	Correction bool
}

// EndAttempt ends r's attempt if it is still in one of the statuses from;
// it returns the updated run, or nil when the attempt had moved on. An
// end in StatusReviewing (an executed attempt of a task watch with a
// review) also writes the attempt's pending review, in the same
// statement.
func EndAttempt(ctx context.Context, q Querier, r *Run, e End, from ...string) (*Run, error) {
	var result any
	if len(e.Result) > 0 {
		result = string(e.Result)
	}
	query := queryEnd
	if e.Status == StatusReviewing {
		query = queryEndForReview // and the review waits in task_reviews
	}
	out, err := scanRun(q.QueryRow(ctx, query, r.ID, r.Attempt, e.Status, e.At, e.ExitCode, result, e.StderrTail,
		e.Error, e.Failures, e.RetryAt, e.ToolDue, e.ToolAction, from, e.Correction))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("task run %d: record %s: %w", r.ID, e.Status, err)
	}
	return out, nil
}

// ToolDone records that the tool shows r's state for action.
func ToolDone(ctx context.Context, q Querier, r *Run, action string) error {
	if _, err := q.Exec(ctx, queryToolDone, r.ID, r.Attempt, action); err != nil {
		return fmt.Errorf("task run %d: record the %s write: %w", r.ID, action, err)
	}
	return nil
}

// ToolFailed records a failed write to the tool, to try again at due.
func ToolFailed(ctx context.Context, q Querier, r *Run, action, msg string, due time.Time) error {
	if _, err := q.Exec(ctx, queryToolFailed, r.ID, r.Attempt, action, msg, due); err != nil {
		return fmt.Errorf("task run %d: record the failed %s write: %w", r.ID, action, err)
	}
	return nil
}

// Expired locks, in tx, up to limit active attempts of sources whose
// claim expired before now; the caller ends each (EndAttempt) and commits.
func Expired(ctx context.Context, tx pgx.Tx, sources []string, now time.Time, limit int) ([]*Run, error) {
	runs, err := db.EachShard(ctx, tx, "task_runs", sources, limit, func(group []string, limit int) ([]*Run, error) {
		return collect(tx.Query(ctx, queryExpired, group, now, limit))
	})
	if err != nil {
		return nil, fmt.Errorf("read expired task claims: %w", err)
	}
	return runs, nil
}

// ToolDue leases up to limit due tool writes of sources until until.
func ToolDue(ctx context.Context, q Querier, sources []string, now, until time.Time, limit int) ([]*Run, error) {
	runs, err := db.EachShard(ctx, q, "task_runs", sources, limit, func(group []string, limit int) ([]*Run, error) {
		return collect(q.Query(ctx, queryToolDue, group, now, limit, until))
	})
	if err != nil {
		return nil, fmt.Errorf("read due task writes: %w", err)
	}
	return runs, nil
}

// Reported locks, in tx, up to limit running attempts of sources that an
// agent reported on (Run.Report set); the caller ends each and commits.
func Reported(ctx context.Context, tx pgx.Tx, sources []string, limit int) ([]*Run, error) {
	return db.EachShard(ctx, tx, "task_runs", sources, limit, func(group []string, limit int) ([]*Run, error) {
		return reported(ctx, tx, group, limit)
	})
}

func reported(ctx context.Context, tx pgx.Tx, sources []string, limit int) ([]*Run, error) {
	rows, err := tx.Query(ctx, queryReported, sources, limit)
	if err != nil {
		return nil, fmt.Errorf("read reported task runs: %w", err)
	}
	defer rows.Close()
	var out []*Run
	for rows.Next() {
		var report []byte
		r, err := scanRun(rows, &report)
		if err != nil {
			return nil, fmt.Errorf("read reported task runs: %w", err)
		}
		r.Report = report
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read reported task runs: %w", err)
	}
	return out, nil
}

// List returns up to limit runs, newest first, of source ("" for all)
// and record ("" for all).
func List(ctx context.Context, q Querier, source, record string, limit int) ([]*Run, error) {
	runs, err := collect(q.Query(ctx, queryList, source, record, limit))
	if err != nil {
		return nil, fmt.Errorf("list task runs: %w", err)
	}
	return runs, nil
}

// Candidate is a live record of a source, as the task runner evaluates it.
type Candidate struct {
	ID, Title, Body, URL, Author, Status string
	Version                              int
	Labels                               []string
	CreatedAt, UpdatedAt                 *time.Time
	Extra                                map[string]any
}

// Candidates returns the live records of source.
func Candidates(ctx context.Context, q Querier, source string) ([]Candidate, error) {
	rows, err := q.Query(ctx, queryCandidates, source)
	if err != nil {
		return nil, fmt.Errorf("read the records of %s: %w", source, err)
	}
	defer rows.Close()
	var out []Candidate
	for rows.Next() {
		var c Candidate
		if err := rows.Scan(&c.ID, &c.Version, &c.Title, &c.Body, &c.URL, &c.Author, &c.Status, &c.Labels,
			&c.CreatedAt, &c.UpdatedAt, &c.Extra); err != nil {
			return nil, fmt.Errorf("read the records of %s: %w", source, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the records of %s: %w", source, err)
	}
	return out, nil
}

// Report is an agent's report of a run it was given with 202.
type Report struct {
	// Status is completed or failed.
	Status string `json:"status"`
	// Result is the agent's result (a JSON object), for completed.
	Result json.RawMessage `json:"result,omitempty"`
	// Error says why it failed, for failed.
	Error string `json:"error,omitempty"`
	// Retry, for failed, says whether another attempt may help. Defaults
	// to true.
	Retry *bool `json:"retry,omitempty"`
}

// Errors of SubmitReport.
var (
	// ErrNotFound: no task run has the id.
	ErrNotFound = errors.New("task run not found")
	// ErrBadToken: the token is not the run's current attempt's.
	ErrBadToken = errors.New("the token is not this task run's")
	// ErrConflict: the run has another report, or no longer takes one.
	ErrConflict = errors.New("conflict")
)

// HashToken is how a report token is stored.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// SubmitReport stores rep for run id, given the attempt's token. A second
// report identical to the stored one is a no-op (stored false); another
// one is ErrConflict, as is a report of a run no longer running.
func SubmitReport(ctx context.Context, q Querier, id int64, token string, rep Report, now time.Time) (stored bool, err error) {
	body, err := json.Marshal(rep)
	if err != nil {
		return false, fmt.Errorf("encode the report: %w", err)
	}
	hash := HashToken(token)
	tag, err := q.Exec(ctx, queryReport, id, hash, body, now)
	if err != nil {
		return false, fmt.Errorf("task run %d: store the report: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	var report []byte
	var tokenHash string
	r, err := scanRun(q.QueryRow(ctx, queryByID, id), &tokenHash, &report)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, ErrNotFound
	case err != nil:
		return false, fmt.Errorf("task run %d: %w", id, err)
	}
	if tokenHash == "" || subtle.ConstantTimeCompare([]byte(tokenHash), []byte(hash)) != 1 {
		return false, ErrBadToken
	}
	if report != nil {
		if sameJSON(report, body) {
			return false, nil
		}
		return false, fmt.Errorf("%w: task run %d already has another report (%s)", ErrConflict, id, report)
	}
	return false, fmt.Errorf("%w: task run %d is %s, it no longer takes a report", ErrConflict, id, r.Status)
}

// sameJSON compares two JSON documents by value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// WriteRuns prints runs as a table: the `syncer tasks` command.
func WriteRuns(w io.Writer, runs []*Run, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSOURCE\tTASK\tRECORD\tRUN\tSTATUS\tATTEMPT\tRETRIES\tCLAIMED BY\tCLAIMED\tRAN FOR\tEXIT\tTOOL\tLAST ERROR")
	for _, r := range runs {
		ran, exit, tool := "-", "-", "in sync"
		if r.StartedAt != nil && r.FinishedAt != nil {
			ran = r.FinishedAt.Sub(*r.StartedAt).Round(time.Millisecond).String()
		} else if r.StartedAt != nil {
			ran = "running " + now.Sub(*r.StartedAt).Round(time.Second).String()
		}
		if r.ExitCode != nil {
			exit = fmt.Sprint(*r.ExitCode)
		}
		if r.ToolAction != "" {
			tool = r.ToolAction + " pending"
		}
		status := r.Status
		if r.RetryAt != nil && !r.Active() {
			status += ", retry " + r.RetryAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Source, r.Task, r.RecordID, r.RunID,
			status, r.Attempt, r.Failures, r.ClaimedBy, r.ClaimedAt.UTC().Format(time.RFC3339), ran, exit, tool, clipText(r.LastError, 120))
	}
	return tw.Flush()
}

func clipText(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// Prune deletes at most limit runs that finished before before and are
// over for good — completed, failed, or released, lost or expired without
// a retry time, the tool showing their state — and returns how many.
// Attempts in progress, runs waiting for a retry and runs with a tool
// write due are never deleted. internal/retention calls it until a batch
// is short. A pruned run's idempotency key goes with it: the same task
// version, eligible again, would be claimed as a new run.
func Prune(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	n, err := db.PruneEachShard(ctx, q, "task_runs", before, limit, queryPruneCandidates, queryPrune)
	if err != nil {
		return n, fmt.Errorf("prune task runs finished before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}

// CountPrunable counts the runs Prune would delete (a dry run).
func CountPrunable(ctx context.Context, q Querier, before time.Time) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, queryCountPrunable, before).Scan(&n); err != nil {
		return 0, fmt.Errorf("count task runs finished before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
