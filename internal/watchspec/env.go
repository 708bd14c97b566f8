package watchspec

import (
	"slices"

	"github.com/expr-lang/expr/vm"
)

// Change is a change as a watch's `when` sees it.
type Change struct {
	ID            int64
	Source        string
	Kind          string
	Version       int
	ChangedFields []string
	// Record is the record after the change; Previous before it (nil for
	// a created record).
	Record, Previous map[string]any
}

// Env builds the expression environment of c: the variables
// normalize.CompileWhen declares (record, previous, change, source,
// changed). The evaluator and the replay (internal/replay) both run
// Match over it.
func (c Change) Env() map[string]any {
	var prev any
	if c.Previous != nil {
		prev = c.Previous
	}
	fields := c.ChangedFields
	return map[string]any{
		"record":   c.Record,
		"previous": prev,
		"change": map[string]any{
			"id":             c.ID,
			"kind":           c.Kind,
			"version":        c.Version,
			"changed_fields": toAny(fields),
		},
		"source":  c.Source,
		"changed": func(f string) bool { return slices.Contains(fields, f) },
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// Runner runs watches' conditions over changes one after another, in one
// goroutine: it holds one expression environment, refilled for each
// change (Env), and one expression VM. Building a fresh environment
// (Change.Env: two maps, a slice and a closure) and a fresh VM for every
// change was about a tenth of the evaluator's allocations in a drain
// (docs/benchmarks.md, (4) on branch eval-go). The zero Runner is not
// usable: call NewRunner. A Runner is not safe for concurrent use.
type Runner struct {
	vm          vm.VM
	env, change map[string]any
	fields      []any
	cur         []string // the current change's changed fields, for changed()
	// The last source and kind boxed, reused while they repeat (a batch's
	// changes share a few).
	source, kind       string
	sourceAny, kindAny any
}

// NewRunner returns a Runner.
func NewRunner() *Runner {
	r := &Runner{change: make(map[string]any, 4), fields: make([]any, 0, 8)}
	r.env = map[string]any{
		"record":   nil,
		"previous": nil,
		"change":   r.change,
		"source":   nil,
		"changed":  func(f string) bool { return slices.Contains(r.cur, f) },
	}
	return r
}

// Env refills the runner's environment with c's variables, the values
// Change.Env gives, and returns it. It holds them until the next call of
// Env; the conditions run over it (Filter) keep nothing of it.
func (r *Runner) Env(c *Change) map[string]any {
	var prev any
	if c.Previous != nil {
		prev = c.Previous
	}
	if r.sourceAny == nil || r.source != c.Source {
		r.source, r.sourceAny = c.Source, c.Source
	}
	if r.kindAny == nil || r.kind != c.Kind {
		r.kind, r.kindAny = c.Kind, c.Kind
	}
	clear(r.fields)
	r.fields = r.fields[:0]
	for _, f := range c.ChangedFields {
		r.fields = append(r.fields, f)
	}
	r.cur = c.ChangedFields
	r.change["id"] = c.ID
	r.change["kind"] = r.kindAny
	r.change["version"] = c.Version
	r.change["changed_fields"] = r.fields
	r.env["record"] = c.Record
	r.env["previous"] = prev
	r.env["source"] = r.sourceAny
	return r.env
}

// Filter is w.Filter(env) run on the runner's VM.
func (r *Runner) Filter(w *Watch, env map[string]any) (matched bool, verdict, reason string) {
	ok, err := w.When.RunOn(&r.vm, env)
	return w.filtered(ok, err)
}
