package sources

// RunStatus is a run's status as stored in sync_runs.status, and as the
// syncer's metrics, logs and stop.when (run.status) name it. The SQL of
// the migrations and queries.go spells the same strings ('running',
// 'failed', 'deferred', 'abandoned'); docs/acquisition.md lists them (sync_runs).
type RunStatus string

// The statuses of a run.
const (
	// RunRunning is a run still in progress whose row was written early:
	// its first batch, or its first lease renewal.
	RunRunning RunStatus = "running"
	// RunSucceeded is a run that fetched every page and wrote them.
	RunSucceeded RunStatus = "succeeded"
	// RunNotModified is a run the upstream answered "not modified".
	RunNotModified RunStatus = "not_modified"
	// RunFailed is a run that failed: it counts towards stop.max_failures
	// and the source backs off.
	RunFailed RunStatus = "failed"
	// RunDeferred is a run the upstream postponed (rate limited, Retry-After):
	// due again at the time it gave, without counting as a failure.
	RunDeferred RunStatus = "deferred"
	// RunAbandoned is a run given back: interrupted by shutdown, or one
	// whose lease another replica took over.
	RunAbandoned RunStatus = "abandoned"
)

// runStatuses are every RunStatus, for the test that holds them to the
// schema's CHECK on sync_runs.status.
var runStatuses = []RunStatus{RunRunning, RunSucceeded, RunNotModified, RunFailed, RunDeferred, RunAbandoned}

// Succeeded reports whether the run completed without error (succeeded or
// not modified): the source's cursor and last_success_at move on.
func (s RunStatus) Succeeded() bool {
	return s == RunSucceeded || s == RunNotModified
}
