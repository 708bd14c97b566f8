package metrics

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

// fleet is what /metrics serves for a fleet of n sources that each ran
// once: the syncer's registry (run instruments, upstream responses, the
// sources gauges read from a sources table of n rows) and the evaluator's
// (decisions, decision lag, deliveries, the outbox gauges).
type fleet struct {
	syncer, evaluator *Metrics
}

// registerSources writes n active sources into the schema of pool, through
// one statement (the gauges read the table; how the rows came is not
// what is measured). Every tenth source has failed twice in a row, and
// every source has a last success.
func registerSources(tb testing.TB, pool *pgxpool.Pool, n int) {
	tb.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO sources (name, connector, config_hash, next_run_at, last_success_at, failure_count)
		SELECT 'source-' || i, (ARRAY['file', 'http', 'rss', 'github'])[1 + i % 4], 'h',
		       now() + interval '1 minute', now() - interval '30 seconds',
		       CASE WHEN i % 10 = 0 THEN 2 ELSE 0 END
		FROM generate_series(1, $1) AS i`, n)
	if err != nil {
		tb.Fatalf("register %d sources: %v", n, err)
	}
}

// connectorOf is the connector registerSources gives source i.
func connectorOf(i int) string { return []string{"file", "http", "rss", "github"}[i%4] }

// simulate makes each of n sources run once through the instruments the
// syncer and the evaluator call: a claim, a lateness, an upstream answer,
// a run that wrote one change, and the change's decision by a watch.
func simulate(f fleet, n int) {
	for i := 1; i <= n; i++ {
		src := "source-" + strconv.Itoa(i)
		f.syncer.InitConnector(connectorOf(i))
		f.syncer.PollStarted(connectorOf(i))
		f.syncer.ScheduleLateness(50 * time.Millisecond)
		f.syncer.UpstreamResponse("api.example.com", 200)
		f.syncer.RecordsChanged(connectorOf(i), 1, 0, 0)
		status := "succeeded"
		if i%10 == 0 {
			status = "failed"
		}
		f.syncer.PollFinished(src, connectorOf(i), status, 120*time.Millisecond)
		f.evaluator.Decision("filter", "notify")
		f.evaluator.DecisionLag(300 * time.Millisecond)
	}
	f.evaluator.Delivery("log", "delivered", 10*time.Millisecond)
}

// exposition is one scrape of m's /metrics in the text format: its size
// in bytes and the number of samples (lines that are not comments), and
// whether the handler gave up past its timeout (503), in which case the
// figures are those of a scrape without a timeout.
func exposition(tb testing.TB, m *Metrics) (bytes, samples int, timedOut bool) {
	tb.Helper()
	rec := httptest.NewRecorder()
	m.Handler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code == http.StatusServiceUnavailable {
		timedOut = true
		rec = httptest.NewRecorder()
		promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	}
	if rec.Code != http.StatusOK {
		tb.Fatalf("scrape = %d: %.300s", rec.Code, rec.Body)
	}
	body := rec.Body.Bytes()
	start := 0
	for i, c := range body {
		if c != '\n' {
			continue
		}
		if i > start && body[start] != '#' {
			samples++
		}
		start = i + 1
	}
	return len(body), samples, timedOut
}

// newFleet builds the two registries of a fleet of n sources on pool.
func newFleet(tb testing.TB, pool *pgxpool.Pool, n int, perSource bool) fleet {
	tb.Helper()
	registerSources(tb, pool, n)
	f := fleet{syncer: New(), evaluator: New()}
	g := SourceGauges
	if perSource {
		g |= PerSourceGauges
	}
	f.syncer.CollectDatabase(pool, g, nil, time.Minute)
	f.evaluator.CollectDatabase(pool, OutboxGauges, []string{"log"}, time.Minute)
	simulate(f, n)
	return f
}

// BenchmarkExposition measures what a fleet of sources costs on /metrics:
// the series (samples) and bytes of one scrape of the syncer and of the
// evaluator, and the time of a syncer scrape (ns/op). Run with
//
//	go test ./internal/metrics -run '^$' -bench Exposition -benchtime 3x
func BenchmarkExposition(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		for _, perSource := range []bool{false, true} {
			b.Run(fmt.Sprintf("sources=%d/per_source=%v", n, perSource), func(b *testing.B) {
				f := newFleet(b, pgtest.Pool(b), n, perSource)
				eb, es, eto := exposition(b, f.evaluator)
				var sb, ss int
				var sto bool
				b.ResetTimer()
				for b.Loop() {
					sb, ss, sto = exposition(b, f.syncer)
				}
				if sto || eto {
					b.Logf("a scrape took longer than the handler's 10 s timeout (503): syncer %v, evaluator %v", sto, eto)
				}
				b.ReportMetric(float64(ss), "syncer_series")
				b.ReportMetric(float64(sb), "syncer_bytes")
				b.ReportMetric(float64(es), "evaluator_series")
				b.ReportMetric(float64(eb), "evaluator_bytes")
			})
		}
	}
}

// The series of a scrape do not grow with the sources: 40 sources or
// 2,000 that each ran once serve the same series; with PerSourceGauges,
// exactly two more per source.
func TestSeriesDoNotGrowWithSources(t *testing.T) {
	t.Parallel()
	series := func(n int, perSource bool) (syncer, evaluator int) {
		f := newFleet(t, pgtest.Pool(t), n, perSource)
		_, syncer, _ = exposition(t, f.syncer)
		_, evaluator, _ = exposition(t, f.evaluator)
		return syncer, evaluator
	}
	s40, e40 := series(40, false)
	s2k, e2k := series(2_000, false)
	if s2k != s40 || e2k != e40 {
		t.Errorf("series at 40 sources: syncer %d, evaluator %d; at 2,000: syncer %d, evaluator %d — they grow with the sources", s40, e40, s2k, e2k)
	}
	p40, _ := series(40, true)
	p2k, _ := series(2_000, true)
	if p40 != s40+2*40 || p2k != s2k+2*2_000 {
		t.Errorf("with per-source gauges: %d series at 40 sources, %d at 2,000; want %d and %d (two per source)", p40, p2k, s40+2*40, s2k+2*2_000)
	}
}
