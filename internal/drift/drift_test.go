package drift_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/drift"
	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/semantic"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/service"
)

// The weeks of the seeded history: a baseline week, a week on the same
// topic and a week whose reasons moved to another topic. "Now" is the
// Wednesday of the shifted week.
var (
	week0 = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	week1 = week0.AddDate(0, 0, 7)
	week2 = week0.AddDate(0, 0, 14)
	now   = week2.AddDate(0, 0, 2).Add(10 * time.Hour)
)

const embedModel = "tiny-embed"

var billing = []string{
	"The invoice payment is overdue and the customer billing account needs attention",
	"Customer billing shows an overdue invoice payment",
	"An unpaid invoice on the billing account of the customer",
	"The customer asks about invoice payment and billing",
	"Overdue payment on the customer invoice, billing reminder sent",
}

var outage = []string{
	"The database server crashed during the outage and latency spiked",
	"Server outage: database crash, high latency on every request",
	"A crash of the primary database caused an outage",
	"Latency alarms after the server outage and database restart",
	"The outage took the database server down",
}

type setup struct {
	pool *pgxpool.Pool
	fake *ollamatest.Server
	cli  *semantic.Client
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	fake := ollamatest.New(t, map[string]string{embedModel + ":latest": "sha256:e1", "llama3.2:latest": "sha256:c1"})
	cli, err := semantic.NewClient(modelspec.Config{Host: fake.URL, PerSecond: 1000, Burst: 100, HoldMax: time.Minute, DigestTTL: time.Hour},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return &setup{pool: pgtest.Pool(t), fake: fake, cli: cli}
}

func (s *setup) service(t *testing.T, conf drift.Config) *drift.Service {
	t.Helper()
	conf.EmbedModel = embedModel
	conf.Threshold = 0.2
	conf.MinSamples = 10
	conf.Now = func() time.Time { return now }
	svc, err := drift.New(s.pool, s.cli, conf, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// seed writes n model calls of watch tickets/triage in week w, their
// reasons taken in turn from reasons, answered by llama3.2 with digest,
// and one model-judged evaluation each (every third one notify).
func (s *setup) seed(t *testing.T, w time.Time, n int, reasons []string, digest string) {
	t.Helper()
	_, err := s.pool.Exec(context.Background(), `
		WITH c AS (
			INSERT INTO model_calls (source, record_id, watch, model, model_digest, prompt_version, input_ref, input_hash,
			                         outcome, reason, owner, created_at)
			SELECT 'tickets', 'r-' || i, 'triage', 'llama3.2', $4, 'pv-1', 'change:' || i, 'h' || i,
			       'ok', ($3::text[])[1 + i % cardinality($3::text[])], 'alice', $1::timestamptz + i * interval '1 hour'
			FROM generate_series(1, $2::int) i
			RETURNING id, created_at, record_id)
		INSERT INTO evaluations (change_id, source, record_id, watch, step, matched, decision, model_call_id, evaluator,
		                         created_at, owner, change_created_at)
		SELECT 900000 + id, 'tickets', record_id, 'triage', 'model', true,
		       CASE WHEN id % 3 = 0 THEN 'notify' ELSE 'skip' END, id, 'evaluator-1', created_at, 'alice', created_at
		FROM c`, w, n, reasons, digest)
	if err != nil {
		t.Fatal(err)
	}
}

// drain runs passes until one queues and embeds nothing.
func drain(t *testing.T, svc *drift.Service) drift.PassResult {
	t.Helper()
	var total drift.PassResult
	for range 50 {
		res, err := svc.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		total.Fed += res.Fed
		total.Embedded += res.Embedded
		total.Held += res.Held
		total.Versions += res.Versions
		total.Alerts += res.Alerts
		if res.Fed == 0 && res.Embedded == 0 {
			return total
		}
	}
	t.Fatal("the queue did not drain in 50 passes")
	return total
}

func TestDriftOnSeededShift(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	s.seed(t, week0, 30, billing, "sha256:c1")
	s.seed(t, week1, 30, billing[1:], "sha256:c1")
	s.seed(t, week2, 30, outage, "sha256:c2") // a new model version answers the shifted week
	svc := s.service(t, drift.Config{Notify: []string{"log", "ops"}, Batch: 16})
	res := drain(t, svc)
	if res.Fed != 90 || res.Embedded != 90 || res.Held != 0 {
		t.Fatalf("pass results %+v, want 90 fed and embedded", res)
	}
	// Two sinks of the one drifted watch and week.
	if res.Alerts != 2 {
		t.Errorf("alerts written %d, want 2 (week %s to log and ops)", res.Alerts, week2.Format(time.DateOnly))
	}
	if _, inputs := s.fake.EmbedCalls(); inputs != 90 {
		t.Errorf("the fake embedded %d inputs, want 90", inputs)
	}
	reports, err := drift.Report(ctx, s.pool, drift.Settings{EmbedModel: embedModel, Threshold: 0.2, MinSamples: 10},
		drift.ReportQuery{Weeks: 3, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 1 || reports[0].Source != "tickets" || reports[0].Watch != "triage" || reports[0].Owner != "alice" {
		t.Fatalf("reports %+v", reports)
	}
	r := reports[0]
	if r.BaselineWeek == nil || !r.BaselineWeek.Equal(week0) || len(r.Weeks) != 3 {
		t.Fatalf("baseline %v, %d weeks", r.BaselineWeek, len(r.Weeks))
	}
	w0, w1, w2 := r.Weeks[0], r.Weeks[1], r.Weeks[2]
	t.Logf("distances: week1 %.4f, week2 %.4f; spreads %.3f %.3f %.3f", *w1.Distance, *w2.Distance, *w0.Spread, *w1.Spread, *w2.Spread)
	if !w0.Baseline || *w0.Distance > 1e-9 || w0.Drifted {
		t.Errorf("baseline week %+v: want distance 0, not drifted", w0)
	}
	if *w1.Distance >= 0.2 || w1.Drifted {
		t.Errorf("same topic: distance %.4f, drifted %v; want under the threshold", *w1.Distance, w1.Drifted)
	}
	if *w2.Distance <= 0.2 || !w2.Drifted {
		t.Errorf("shifted topic: distance %.4f, drifted %v; want over the threshold", *w2.Distance, w2.Drifted)
	}
	if w2.Judged != 30 || w2.NotifyRate == nil || w2.Notify != 10 {
		t.Errorf("week 2 rates: judged %d notify %d", w2.Judged, w2.Notify)
	}
	// The digest change is recorded once and shown in its week.
	if len(w0.ModelChanges)+len(w1.ModelChanges) != 0 || len(w2.ModelChanges) != 1 {
		t.Fatalf("model changes %v / %v / %v, want one in week 2", w0.ModelChanges, w1.ModelChanges, w2.ModelChanges)
	}
	if c := w2.ModelChanges[0]; c.Model != "llama3.2" || c.From != "sha256:c1" || c.To != "sha256:c2" || !c.At.Equal(week2.Add(time.Hour)) {
		t.Errorf("model change %+v", c)
	}
	var versions int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM model_versions WHERE model = 'llama3.2'`).Scan(&versions); err != nil || versions != 2 {
		t.Errorf("model_versions of llama3.2: %d (%v), want 2 (first seen, then the change)", versions, err)
	}
	// Once per watch per week: another pass, another replica, nothing new.
	if n, err := svc.Check(ctx); err != nil || n != 0 {
		t.Errorf("the same service checked again and wrote %d alert(s) (%v), want 0", n, err)
	}
	other := s.service(t, drift.Config{Notify: []string{"log", "ops"}, Owner: "replica-2"})
	if n, err := other.Check(ctx); err != nil || n != 0 {
		t.Errorf("a second check wrote %d alert(s) (%v), want 0", n, err)
	}
	var keys []string
	rows, err := s.pool.Query(ctx, `SELECT dedupe_key || ' ' || sink FROM notifications ORDER BY sink`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	want := []string{"alert/model_drift/tickets/triage/2026-11-16 log", "alert/model_drift/tickets/triage/2026-11-16 ops"}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("notifications %q, want %q", keys, want)
	}
}

func TestModelDownHoldsTheQueue(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	s.seed(t, week0, 12, billing, "sha256:c1")
	svc := s.service(t, drift.Config{Batch: 5, Hold: service.Backoff{Min: time.Hour, Max: time.Hour}})
	s.fake.EmbedDown(http.StatusServiceUnavailable)
	res, err := svc.Pass(ctx)
	if err != nil {
		t.Fatalf("a model outage is not an error of the pass: %v", err)
	}
	if res.Fed != 12 || res.Embedded != 0 || res.Held != 5 {
		t.Fatalf("pass %+v, want 12 fed, 5 held (one batch), 0 embedded", res)
	}
	calls, _ := s.fake.EmbedCalls()
	// Held rows wait for their retry; the breaker keeps the others from
	// sending a request to a server known to be down.
	res, err = svc.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.fake.EmbedCalls(); res.Embedded != 0 || again != calls {
		t.Errorf("second pass %+v with %d more request(s) to a server that failed", res, again-calls)
	}
	st, err := drift.QueueState(ctx, s.pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 12 || st.Embedded != 0 || st.Held < 5 {
		t.Errorf("queue %+v, want 12 pending (at least 5 held), nothing lost", st)
	}
	var lastErr string
	if err := s.pool.QueryRow(ctx, `SELECT last_error FROM drift_embeddings WHERE attempts > 0 LIMIT 1`).Scan(&lastErr); err != nil ||
		!strings.Contains(lastErr, "server unavailable") {
		t.Errorf("last_error %q (%v), want the fake server's error", lastErr, err)
	}
	// The server is back and the hold is over (the clock moved on).
	s.fake.EmbedDown(0)
	s.cli.ResetBreaker()
	if _, err := s.pool.Exec(ctx, `UPDATE drift_embeddings SET next_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	total := drain(t, svc)
	if total.Embedded != 12 {
		t.Errorf("embedded %d after the outage, want all 12", total.Embedded)
	}
	st, err = drift.QueueState(ctx, s.pool)
	if err != nil || st != (drift.Queue{Embedded: 12}) {
		t.Errorf("queue %+v (%v), want 12 embedded and nothing pending", st, err)
	}
}
