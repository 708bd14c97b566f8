package normalize

import (
	"runtime"
	"testing"
)

// Watches copying a condition share one compiled program; a different
// text or a different record shape (fields.extra) compiles its own.
func TestCompileWhenSharesOneProgramPerConditionAndShape(t *testing.T) {
	const when = `record.status == "open" && "urgent" in record.labels`
	a, err := CompileWhen(when, FieldExprs{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := CompileWhen(when, FieldExprs{Status: "item.state"})
	if err != nil {
		t.Fatal(err)
	}
	if a != b || a.prog != b.prog {
		t.Errorf("two watches with the same when (same record shape) hold %p and %p (programs %p, %p), want one *vm.Program", a, b, a.prog, b.prog)
	}
	other, err := CompileWhen(`record.status == "closed"`, FieldExprs{})
	if err != nil {
		t.Fatal(err)
	}
	if other == a || other.prog == a.prog {
		t.Error("a different when shares the program of another")
	}
	withExtra, err := CompileWhen(when, FieldExprs{Extra: map[string]string{"plan": "item.plan"}})
	if err != nil {
		t.Fatal(err)
	}
	if withExtra == a {
		t.Error("the same when over a different record shape (fields.extra set) shares the program compiled without it")
	}
	// The shape decides what is valid: record.extra.plan is known with
	// the extra key declared, unknown without, and the cache keeps no
	// error and mixes no shapes.
	for _, c := range []struct {
		extra map[string]string
		ok    bool
	}{{map[string]string{"plan": "item.plan"}, true}, {map[string]string{"tier": "item.tier"}, false}, {map[string]string{"plan": ""}, false}, {map[string]string{"plan": "item.plan"}, true}} {
		_, err := CompileWhen(`record.extra.plan == "pro"`, FieldExprs{Extra: c.extra})
		if (err == nil) != c.ok {
			t.Errorf("extra %v: err %v, want ok %v", c.extra, err, c.ok)
		}
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}
