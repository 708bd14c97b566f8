package metrics

import (
	"maps"
	"slices"
	"sync"
)

// Failures is what went wrong in this process since its Metrics was
// created: what a once command reports and exits 1 for.
type Failures struct {
	// Runs counts the failed runs by source (status failed: an upstream
	// error, a refused deletion, a lost lease; not a deferral).
	Runs map[string]int
	// Evaluations counts the (change, watch) decisions error (a watch
	// that cannot be evaluated) and hold (the model failed; retried later).
	Evaluations int
	// Deliveries counts the delivery attempts that failed: retry and dead.
	Deliveries int
}

// Any reports whether anything failed.
func (f Failures) Any() bool { return len(f.Runs) > 0 || f.Evaluations > 0 || f.Deliveries > 0 }

// FailedSources lists the sources with a failed run, sorted.
func (f Failures) FailedSources() []string { return slices.Sorted(maps.Keys(f.Runs)) }

// failures accumulates Failures as the instruments record.
type failures struct {
	mu sync.Mutex
	f  Failures
}

func (t *failures) add(fn func(f *Failures)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.f.Runs == nil {
		t.f.Runs = map[string]int{}
	}
	fn(&t.f)
}

// Failures returns what failed so far (zero for a nil Metrics).
func (m *Metrics) Failures() Failures {
	if m == nil {
		return Failures{}
	}
	m.failed.mu.Lock()
	defer m.failed.mu.Unlock()
	f := m.failed.f
	f.Runs = maps.Clone(f.Runs)
	return f
}
