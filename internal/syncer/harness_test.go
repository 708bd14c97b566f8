package syncer

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fastLimits lifts the default rate limits (1/s per source, 2/s per host)
// for tests that run a source many times on a fake clock.
const fastLimits = "defaults: {rate_limit: {per_second: 1000, burst: 100}, host_rate_limit: {per_second: 1000, burst: 100}}\n"

// fetchFunc is a fake connector's behaviour.
type fetchFunc func(ctx context.Context, env connectors.Env, cursor json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error)

// fakes maps a source (by its configuration) to its behaviour: the
// "fake" connector of these tests.
var fakes sync.Map // *config.Source -> fetchFunc

func init() {
	decode := func(src *config.Source) (struct{}, error) {
		var block struct{}
		return block, src.DecodeBlock(&block)
	}
	connectors.Register("fake", decode, func(src *config.Source, _ struct{}, env connectors.Env) (connectors.Connector, error) {
		f, ok := fakes.Load(src)
		if !ok {
			return nil, fmt.Errorf("no fake behaviour for source %s", src.Name)
		}
		return &fakeConn{fetch: f.(fetchFunc), env: env}, nil
	})
}

type fakeConn struct {
	fetch fetchFunc
	env   connectors.Env
}

func (f *fakeConn) Fetch(ctx context.Context, cursor json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
	return f.fetch(ctx, f.env, cursor, emit)
}

// loadConfig writes a configuration directory and loads it. Each source
// body is YAML without name and connector: the sources use the fake
// connector, with the behaviour given in fetch (by source name), and every
// schedule and stop key goes through the real validation.
func loadConfig(t *testing.T, global string, sources map[string]string, fetch map[string]fetchFunc) *config.Config {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if global != "" {
		if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range sources {
		y := fmt.Sprintf("name: %s\nconnector: fake\nfake: {}\n%s", name, body)
		if err := os.WriteFile(filepath.Join(dir, "sources", name+".yaml"), []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatalf("load config: %v", err)
	}
	for _, sc := range cfg.Sources {
		f := fetch[sc.Name]
		if f == nil {
			t.Fatalf("no behaviour for source %s", sc.Name)
		}
		fakes.Store(sc, f)
		t.Cleanup(func() { fakes.Delete(sc) })
	}
	return cfg
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now().Truncate(time.Second)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// logBuffer collects log output for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type harness struct {
	t     *testing.T
	pool  *pgxpool.Pool
	url   string
	clock *clock
	logs  *logBuffer
	tr    *http.Transport
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	_, url := pgtest.Schema(t)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &harness{t: t, pool: pgtest.PoolFor(t, url), url: url, clock: newClock(), logs: &logBuffer{}, tr: tr}
}

// syncer builds a syncer on the harness's schema; real is whether it uses
// the real clock instead of the harness's.
func (h *harness) syncer(cfg *config.Config, conf Config) *Syncer {
	h.t.Helper()
	if conf.Owner == "" {
		conf.Owner = "test"
	}
	if conf.Now == nil {
		conf.Now = h.clock.Now
	}
	if conf.Transport == nil {
		conf.Transport = h.tr
	}
	pool := h.pool
	if conf.Owner != "test" {
		pool = pgtest.PoolFor(h.t, h.url) // a replica has its own pool
	}
	return h.syncerOn(pool, cfg, conf)
}

// syncerOn builds a syncer on the harness's schema with pool.
func (h *harness) syncerOn(pool *pgxpool.Pool, cfg *config.Config, conf Config) *Syncer {
	h.t.Helper()
	if conf.Owner == "" {
		conf.Owner = "test"
	}
	if conf.Now == nil {
		conf.Now = h.clock.Now
	}
	if conf.Transport == nil {
		conf.Transport = h.tr
	}
	if conf.RollupEvery == 0 {
		conf.RollupEvery = 20 * time.Millisecond // tests read sync_run_hours while syncers run
	}
	logger := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := New(pool, overlay(FromConfig(cfg), conf), logger)
	if err != nil {
		h.t.Fatalf("new syncer: %v", err)
	}
	if err := s.Register(context.Background()); err != nil {
		h.t.Fatalf("register: %v", err)
	}
	return s
}

// row reads a source's state.
type sourceRow struct {
	Status, StatusReason, IntervalReason, LastError string
	NextRunAt                                       time.Time
	Interval                                        float64
	Failures                                        int
	Cursor                                          string
}

func (h *harness) source(name string) sourceRow {
	h.t.Helper()
	var r sourceRow
	err := h.pool.QueryRow(context.Background(), `
		SELECT status, coalesce(status_reason, ''), coalesce(interval_reason, ''), coalesce(last_error, ''),
		       next_run_at, coalesce(interval_seconds, 0), failure_count, cursor::text
		FROM sources WHERE name = $1`, name).Scan(&r.Status, &r.StatusReason, &r.IntervalReason, &r.LastError,
		&r.NextRunAt, &r.Interval, &r.Failures, &r.Cursor)
	if err != nil {
		h.t.Fatalf("read source %s: %v", name, err)
	}
	return r
}

func (h *harness) exec(sql string, args ...any) {
	h.t.Helper()
	if _, err := h.pool.Exec(context.Background(), sql, args...); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
}

func (h *harness) runDue(s *Syncer) int {
	h.t.Helper()
	n, err := s.RunDue(context.Background())
	if err != nil {
		h.t.Fatalf("run due: %v", err)
	}
	return n
}

// runAt moves the clock to the source's next run and runs what is due.
func (h *harness) runAt(s *Syncer, name string) int {
	h.t.Helper()
	h.clock.Set(h.source(name).NextRunAt)
	return h.runDue(s)
}

type runRow struct {
	ID                     int64
	Owner, Reason, Status  string
	Error                  string
	Requests, Waits, Pages int
	StartedAt, FinishedAt  time.Time
	Created, Updated, Seen int
}

func (h *harness) runs(name string) []runRow {
	h.t.Helper()
	rows, err := h.pool.Query(context.Background(), `
		SELECT id, owner, reason, status, coalesce(error, ''), requests, rate_limit_waits, pages,
		       started_at, coalesce(finished_at, 'infinity'), items_created, items_updated, items_seen
		FROM sync_runs WHERE source = $1 ORDER BY id`, name)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var r runRow
		if err := rows.Scan(&r.ID, &r.Owner, &r.Reason, &r.Status, &r.Error, &r.Requests, &r.Waits, &r.Pages,
			&r.StartedAt, &r.FinishedAt, &r.Created, &r.Updated, &r.Seen); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// items returns a fetch that emits the given items in one page.
func items(list func() []map[string]any) fetchFunc {
	return func(ctx context.Context, env connectors.Env, cursor json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		var page connectors.Page
		for i, it := range list() {
			page.Items = append(page.Items, connectors.Item{Value: it, Loc: fmt.Sprintf("fake[%d]", i)})
		}
		if err := emit(ctx, page); err != nil {
			return connectors.Result{}, err
		}
		return connectors.Result{}, nil
	}
}

// upstream is an httptest server that pages: GET /{source}/page/{n}
// returns {"items": [...], "next": n+1 or null}. It records every request
// with the clock reading at arrival, and lets a test script failures.
type upstream struct {
	*httptest.Server
	clock func() time.Time
	pages int

	mu       sync.Mutex
	requests []request
	script   map[string]func(w http.ResponseWriter, r *http.Request) bool // path -> respond instead (return true when it answered)
	total    atomic.Int64
}

type request struct {
	Path string
	At   time.Time // the test clock at arrival
	Real time.Time
}

func newUpstream(t *testing.T, pages int, clock func() time.Time) *upstream {
	u := &upstream{clock: clock, pages: pages, script: map[string]func(http.ResponseWriter, *http.Request) bool{}}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.total.Add(1)
	u.mu.Lock()
	u.requests = append(u.requests, request{Path: r.URL.Path, At: u.clock(), Real: time.Now()})
	fn := u.script[r.URL.Path]
	u.mu.Unlock()
	if fn != nil && fn(w, r) {
		return
	}
	var src string
	var n int
	if _, err := fmt.Sscanf(strings.ReplaceAll(r.URL.Path, "/", " "), "%s page %d", &src, &n); err != nil {
		http.Error(w, "bad path "+r.URL.Path, http.StatusNotFound)
		return
	}
	var next any
	if n < u.pages {
		next = n + 1
	}
	list := []map[string]any{{"id": fmt.Sprintf("%s-p%d", src, n), "title": fmt.Sprintf("page %d", n)}}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"items": list, "next": next})
}

// on scripts the response to path; fn returns whether it answered.
func (u *upstream) on(path string, fn func(w http.ResponseWriter, r *http.Request) bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.script[path] = fn
}

func (u *upstream) log() []request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]request(nil), u.requests...)
}

// pager returns a fetch that walks the upstream's pages of src from the
// stored cursor {"page": n}, committing the cursor with every page, like a
// real paging connector; a complete run starts over next time.
func pager(base func() string, src string) fetchFunc {
	return func(ctx context.Context, env connectors.Env, cursor json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		var cur struct {
			Page int `json:"page"`
		}
		_ = json.Unmarshal(cursor, &cur)
		page := max(cur.Page, 1)
		res := connectors.Result{}
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/%s/page/%d", base(), src, page), nil)
			if err != nil {
				return res, err
			}
			resp, err := env.HTTP.Do(req)
			if err != nil {
				return res, fmt.Errorf("GET page %d: %w", page, err)
			}
			res.Requests++
			// Retry-After in seconds is read at the syncer's clock, as the
			// connectors read it (connectors.CheckStatusAt with Env.Now):
			// at the real time it would be as late as the test had run.
			now := time.Now
			if env.Now != nil {
				now = env.Now
			}
			if err := connectors.CheckStatusAt(resp, now()); err != nil {
				resp.Body.Close()
				return res, fmt.Errorf("GET page %d: %w", page, err)
			}
			var body struct {
				Items []map[string]any `json:"items"`
				Next  *int             `json:"next"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err != nil {
				return res, fmt.Errorf("page %d: %w", page, err)
			}
			p := connectors.Page{}
			for i, it := range body.Items {
				p.Items = append(p.Items, connectors.Item{Value: it, Loc: fmt.Sprintf("page %d [%d]", page, i)})
			}
			next := 1
			if body.Next != nil {
				next = *body.Next
			}
			p.Cursor, _ = json.Marshal(map[string]int{"page": next})
			if err := emit(ctx, p); err != nil {
				return res, err
			}
			if body.Next == nil {
				res.Cursor = p.Cursor
				return res, nil
			}
			page = next
		}
	}
}

var _ = io.EOF

// overlay returns base with the settings a test set in o (its non-zero
// fields) put over it.
func overlay(base, o Config) Config {
	base.Owner, base.Now, base.Transport, base.Metrics = o.Owner, o.Now, o.Transport, o.Metrics
	base.Lease = cmp.Or(o.Lease, base.Lease)
	base.Concurrency = cmp.Or(o.Concurrency, base.Concurrency)
	base.PollInterval = cmp.Or(o.PollInterval, base.PollInterval)
	base.BatchSize = cmp.Or(o.BatchSize, base.BatchSize)
	base.Backoff.Min = cmp.Or(o.Backoff.Min, base.Backoff.Min)
	base.Backoff.Max = cmp.Or(o.Backoff.Max, base.Backoff.Max)
	base.MaxWait = cmp.Or(o.MaxWait, base.MaxWait)
	base.RunTimeout = cmp.Or(o.RunTimeout, base.RunTimeout)
	base.RollupEvery = cmp.Or(o.RollupEvery, base.RollupEvery)
	return base
}
