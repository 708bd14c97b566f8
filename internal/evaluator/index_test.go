package evaluator

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// watchDelta is a full load of sources×perSource watches, as a follower
// hands it to Apply.
func watchDelta(sources, perSource int) *definitions.Delta {
	d := &definitions.Delta{Full: true, To: 1}
	for i := range sources {
		src := &config.Source{Name: fmt.Sprintf("src-%05d", i), Path: "api"}
		def := &definitions.SourceDef{Row: definitions.Source{Name: src.Name}, Config: src}
		for j := range perSource {
			w := &config.Watch{Name: fmt.Sprintf("w-%03d", j), Notify: []string{"log"}, Urgency: "medium",
				Dedupe: "version", OnModelError: "hold",
				When: fmt.Sprintf(`record.status == "open" && "label-%d" in record.labels && change.kind != "deleted"`, j)}
			src.Watches = append(src.Watches, w)
			def.Watches = append(def.Watches, definitions.Watch{Source: src.Name, Name: w.Name, Owner: fmt.Sprintf("user-%d", j%50)})
		}
		d.Sources = append(d.Sources, def)
	}
	return d
}

func newBare(t testing.TB) *Evaluator {
	e, err := New(nil, Config{Owner: "test"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A change is judged against the watches of its source only, and the
// index follows deltas: a changed watch replaces its old version, a
// removed one goes, a paused one is left out.
func TestIndexFollowsDeltas(t *testing.T) {
	e := newBare(t)
	ctx := context.Background()
	if err := e.Apply(ctx, watchDelta(3, 2)); err != nil {
		t.Fatal(err)
	}
	if n := e.index.count(); n != 6 {
		t.Fatalf("watches = %d, want 6", n)
	}
	if ws := e.index.of("src-00001"); len(ws) != 2 || ws[0].Source != "src-00001" || ws[1].Owner != "user-1" {
		t.Fatalf("watches of src-00001 = %+v", ws)
	}
	src := e.index.source("src-00001")
	changed := &config.Watch{Name: "w-001", When: `record.title == "x"`, Notify: []string{"log"}, Urgency: "high", Dedupe: "version", OnModelError: "hold"}
	d := &definitions.Delta{From: 1, To: 2,
		Watches:        []*definitions.WatchDef{{Row: definitions.Watch{Source: "src-00001", Name: "w-001", Owner: "bob"}, Config: changed, Source: src}},
		RemovedWatches: [][2]string{{"src-00002", "w-000"}}, RemovedSources: []string{"src-00000"}}
	paused := &config.Watch{Name: "w-001", When: "true", Notify: []string{"log"}, Urgency: "low", Dedupe: "version", OnModelError: "hold"}
	d.Watches = append(d.Watches, &definitions.WatchDef{Row: definitions.Watch{Source: "src-00002", Name: "w-001", Paused: true}, Config: paused, Source: src})
	if err := e.Apply(ctx, d); err != nil {
		t.Fatal(err)
	}
	ws := e.index.of("src-00001")
	if len(ws) != 2 || ws[1].Config.Urgency != "high" || ws[1].Owner != "bob" {
		t.Errorf("after a change: %+v", ws)
	}
	if n := len(e.index.of("src-00002")); n != 0 {
		t.Errorf("src-00002 keeps %d watch(es) after a removal and a pause", n)
	}
	if e.index.of("src-00000") != nil || e.index.source("src-00000") != nil {
		t.Errorf("src-00000 stays after its removal")
	}
	// A watch that does not compile keeps its previous version.
	bad := &config.Watch{Name: "w-000", When: `record.title ==`, Notify: []string{"log"}, Urgency: "low", Dedupe: "version", OnModelError: "hold"}
	if err := e.Apply(ctx, &definitions.Delta{From: 2, To: 3, Watches: []*definitions.WatchDef{{Row: definitions.Watch{Source: "src-00001", Name: "w-000"}, Config: bad, Source: src}}}); err != nil {
		t.Fatal(err)
	}
	if ws := e.index.of("src-00001"); len(ws) != 2 || ws[1].Config.When != `record.status == "open" && "label-0" in record.labels && change.kind != "deleted"` {
		t.Errorf("after a bad watch: %v", ws[1].Config.When)
	}
}

// BenchmarkWatchMemory loads 100,000 watches (1,000 sources of 100) and
// reports the heap each costs: its parsed definition, the compiled
// condition, its templates and the index entry.
func BenchmarkWatchMemory(b *testing.B) {
	const sources, per = 1000, 100
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		d := watchDelta(sources, per) // the parsed definitions are kept (watch.Config)
		e := newBare(b)
		if err := e.Apply(context.Background(), d); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := e.index.count(); n != sources*per {
			b.Fatalf("loaded %d watches", n)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(sources*per), "bytes/watch")
		runtime.KeepAlive(e)
	}
}
