package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// TestRetryAfterBlocksHost: a 429 or a spent X-RateLimit budget blocks
// the host for every source until the named time; the run is deferred (no
// failure counted) and resumes from its cursor.
func TestRetryAfterBlocksHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		page    string        // the page that answers with the limit
		wait    time.Duration // how long the host asks to wait
		respond func(w http.ResponseWriter, until time.Time) bool
	}{
		{"retry-after seconds", "/a/page/3", 120 * time.Second, func(w http.ResponseWriter, until time.Time) bool {
			w.Header().Set("Retry-After", "120")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return true
		}},
		{"retry-after http date", "/a/page/3", 2 * time.Hour, func(w http.ResponseWriter, until time.Time) bool {
			w.Header().Set("Retry-After", until.UTC().Format(http.TimeFormat))
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return true
		}},
		{"x-ratelimit-reset on a success", "/a/page/2", 5 * time.Minute, func(w http.ResponseWriter, until time.Time) bool {
			// Page 2 is served, but the budget is spent until the reset:
			// page 3 must not be asked for before it.
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset", fmt.Sprint(until.Unix()))
			return false
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			up := newUpstream(t, 5, h.clock.Now)
			start := h.clock.Now()
			until := start.Add(tc.wait)
			var fired atomic.Bool
			up.on(tc.page, func(w http.ResponseWriter, r *http.Request) bool {
				if fired.Swap(true) {
					return false
				}
				return tc.respond(w, until)
			})
			base := func() string { return up.URL }
			cfg := loadConfig(t, fastLimits, map[string]string{
				"a": "every: 1h\njitter: 0s\n", "b": "every: 1h\njitter: 0s\n",
			}, map[string]fetchFunc{"a": pager(base, "a"), "b": pager(base, "b")})
			s := h.syncer(cfg, Config{})
			h.exec(`UPDATE sources SET next_run_at = $1 WHERE name = 'b'`, start.Add(time.Minute))

			// a reads pages until the host says stop.
			if n := h.runDue(s); n != 1 {
				t.Fatalf("ran %d", n)
			}
			ra := h.source("a")
			if ra.Status != "active" || ra.Failures != 0 || ra.NextRunAt.Before(until) || ra.NextRunAt.After(until.Add(5*time.Second)) {
				t.Fatalf("a after the limit: status %s failures %d next %s (host free at %s)", ra.Status, ra.Failures, ra.NextRunAt, until)
			}
			if ra.Cursor != `{"page": 3}` || !strings.Contains(ra.IntervalReason, "deferred") {
				t.Fatalf("a: cursor %s, reason %q", ra.Cursor, ra.IntervalReason)
			}
			if runs := h.runs("a"); runs[0].Status != "deferred" || runs[0].Pages != 2 {
				t.Fatalf("a's run: %+v", runs[0])
			}
			var blocked time.Time
			var reason string
			if err := h.pool.QueryRow(context.Background(), `SELECT blocked_until, blocked_reason FROM host_limits`).Scan(&blocked, &reason); err != nil {
				t.Fatal(err)
			}
			if !blocked.Equal(until) {
				t.Fatalf("host blocked until %s, want %s (%s)", blocked, until, reason)
			}

			// b falls due while the host is blocked: deferred without a request.
			before := up.total.Load()
			h.clock.Set(start.Add(time.Minute))
			if n := h.runDue(s); n != 1 {
				t.Fatalf("b: ran %d", n)
			}
			if up.total.Load() != before {
				t.Fatalf("b sent %d request(s) to a blocked host", up.total.Load()-before)
			}
			if rb := h.source("b"); rb.Failures != 0 || rb.NextRunAt.Before(until) {
				t.Fatalf("b: failures %d next %s", rb.Failures, rb.NextRunAt)
			}

			// After the block both run; a resumes at page 3.
			h.clock.Set(slices.MaxFunc([]time.Time{h.source("a").NextRunAt, h.source("b").NextRunAt}, time.Time.Compare))
			if n := h.runDue(s); n != 2 {
				t.Fatalf("after the block: ran %d", n)
			}
			log := up.log()
			var limited int
			for i, r := range log {
				if r.Path == tc.page {
					limited = i
					break
				}
			}
			var aAfter []string
			for _, r := range log[limited+1:] {
				if r.At.Before(until) {
					t.Errorf("request %s at %s, before the host's time %s", r.Path, r.At, until)
				}
				if strings.HasPrefix(r.Path, "/a/") {
					aAfter = append(aAfter, r.Path)
				}
			}
			if want := []string{"/a/page/3", "/a/page/4", "/a/page/5"}; !slices.Equal(aAfter, want) {
				t.Errorf("a after the block asked for %v, want %v (resume from the cursor)", aAfter, want)
			}
			var records int
			if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM records WHERE source = 'a'`).Scan(&records); err != nil || records != 5 {
				t.Errorf("a has %d records, want 5 (%v)", records, err)
			}
			for _, name := range []string{"a", "b"} {
				runs := h.runs(name)
				if len(runs) != 2 || runs[0].Status != "deferred" || runs[1].Status != "succeeded" {
					t.Errorf("%s runs: %+v", name, runs)
				}
				if r := h.source(name); r.Failures != 0 || r.Status != "active" {
					t.Errorf("%s: %+v", name, r)
				}
			}
		})
	}
}

// TestRequestTimeoutCutsAHungRequest: a request the upstream never
// answers ends when the source's timeout does, and the run fails naming
// it. The upstream answers only once the client gave up (or the test
// ended): the run returning at all is the timeout at work, whatever the
// machine's speed. (It asserted that the runs took under 2.5 s.)
func TestRequestTimeoutCutsAHungRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	up := newUpstream(t, 3, time.Now)
	release := make(chan struct{})
	var gaveUp atomic.Bool
	up.on("/hang/page/1", func(w http.ResponseWriter, r *http.Request) bool {
		select { // hang until the client gives up
		case <-r.Context().Done():
			gaveUp.Store(true)
		case <-release:
		}
		return true
	})
	t.Cleanup(func() { close(release) }) // before the upstream closes (cleanups run last first)
	base := func() string { return up.URL }
	cfg := loadConfig(t, "", map[string]string{"hang": "every: 1h\njitter: 0s\ntimeout: 200ms\n"},
		map[string]fetchFunc{"hang": pager(base, "hang")})
	s := h.syncer(cfg, Config{Now: time.Now})
	ran := make(chan int, 1)
	go func() {
		n, err := s.RunDue(context.Background())
		if err != nil {
			t.Errorf("run due: %v", err)
		}
		ran <- n
	}()
	if n := testsignal.Receive(t, ran, "the run of the hung source, cut at its timeout"); n != 1 {
		t.Fatalf("ran %d", n)
	}
	if !gaveUp.Load() {
		t.Error("the upstream's hung request did not see the client give up")
	}
	if r := h.source("hang"); r.Failures != 1 || !strings.Contains(r.LastError, "within the source's timeout 200ms") {
		t.Errorf("hang: failures %d, last_error %q", r.Failures, r.LastError)
	}
}

// TestRequestTimeoutExcludesRateLimitWaits: a request's timeout starts
// once its rate-limit wait ended. The wait is held open (the transport's
// sleep replaced) until a timer of the source's whole timeout, started
// when the wait began, has fired; the request then sent carries a
// deadline after the wait's end, and succeeds. Had the timeout started
// before the wait, its deadline would lie before the wait's end. Only the
// order of events is asserted. (It ran three pages at 4/s against a
// 150 ms timeout and asserted that the page requests, each after a
// ~250 ms wait, succeeded: a stall of the machine longer than 150 ms
// failed it.)
func TestRequestTimeoutExcludesRateLimitWaits(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	var waitEnded time.Time
	var waits []time.Duration
	var deadlines []time.Time
	tr := &politeTransport{transportShared: &transportShared{
		base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			dl, ok := req.Context().Deadline()
			if !ok {
				t.Error("a request without the source's timeout")
			}
			deadlines = append(deadlines, dl)
			return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
		}),
		maxWait: 2 * time.Hour,
		now:     time.Now,
		sleep: func(ctx context.Context, d time.Duration) bool {
			waits = append(waits, d)
			whole, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			<-whole.Done() // a whole timeout passes while the request waits
			if ctx.Err() != nil {
				return false
			}
			waitEnded = time.Now()
			return true
		},
	},
		// One request an hour: the second waits for its token.
		perSecond: rate.Every(time.Hour), burst: 1,
		timeout: timeout,
		logger:  slog.New(slog.DiscardHandler),
	}
	client := &http.Client{Transport: tr}
	for i := range 2 {
		resp, err := client.Get("http://upstream.test/page/" + fmt.Sprint(i+1))
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		resp.Body.Close()
	}
	if len(waits) != 1 || waits[0] <= timeout {
		t.Fatalf("waits %v, want one for the second request's token, longer than the timeout %s", waits, timeout)
	}
	if len(deadlines) != 2 || !deadlines[1].After(waitEnded) {
		t.Errorf("the second request's deadline %v is not after the end of its wait %v: the timeout counted the wait",
			deadlines, waitEnded)
	}
}

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// hostScenario runs sources of one host on several replicas for a while
// and measures the request rate the upstream saw.
type hostScenario struct {
	replicas, sources   int
	sourceRate          float64 // each source's rate_limit.per_second
	hostRate, hostBurst float64
	duration            time.Duration
}

type hostMeasure struct {
	requests   int
	span       time.Duration // from the first request's arrival to the last's
	taken      time.Duration // from the replicas' start, before any token was taken, to the last arrival
	maxFixed   int           // most requests in one second, windows from the first request
	maxSliding int           // most requests in any one-second window
	windows    []int         // requests per second, from the first request
	perReplica map[string]int
	waits      int
	bound      int // burst + per_second: the most a token bucket allows in 1s
}

func measureHost(t *testing.T, sc hostScenario) hostMeasure {
	h := newHarness(t)
	up := newUpstream(t, 1_000_000, time.Now)
	u, _ := url.Parse(up.URL)
	global := fmt.Sprintf("defaults: {rate_limit: {per_second: %g, burst: 1}}\nhosts: {%q: {per_second: %g, burst: %g}}\n",
		sc.sourceRate, u.Host, sc.hostRate, sc.hostBurst)
	sources, fetch := map[string]string{}, map[string]fetchFunc{}
	for i := range sc.sources {
		name := fmt.Sprintf("feed%d", i)
		sources[name] = "every: 10ms\njitter: 0s\n"
		fetch[name] = pager(func() string { return up.URL }, name)
	}
	cfg := loadConfig(t, global, sources, fetch)
	var replicas []*Syncer
	for i := range sc.replicas {
		s := h.syncer(cfg, Config{Owner: fmt.Sprintf("replica-%d", i), Now: time.Now, PollInterval: 5 * time.Millisecond,
			Concurrency: (sc.sources + sc.replicas - 1) / sc.replicas})
		replicas = append(replicas, s)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for _, s := range replicas {
				if err := s.Stop(); err != nil {
					t.Errorf("stop: %v", err)
				}
			}
		})
	}
	t.Cleanup(stop)
	began := time.Now()
	for _, s := range replicas {
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	testsignal.Eventually(t, "a first request", func() bool { return up.total.Load() > 0 })
	// The measured period ends on a count, not a clock: once the budget has
	// allowed a duration's worth of requests (burst + per_second x
	// duration), so that the budget, not a busy machine's idleness, was the
	// bound however slow the replicas were (a fixed 2 s window saw 4
	// requests on a Citus cluster at load 20).
	want := int64(sc.hostBurst + sc.hostRate*sc.duration.Seconds())
	testsignal.Eventually(t, fmt.Sprintf("%d requests", want), func() bool { return up.total.Load() >= want })
	stop()

	m := hostMeasure{perReplica: map[string]int{}, bound: int(sc.hostBurst + sc.hostRate)}
	var times []time.Time
	for _, r := range up.log() {
		times = append(times, r.Real)
	}
	first := times[0]
	m.requests = len(times)
	m.span = times[len(times)-1].Sub(first)
	m.taken = times[len(times)-1].Sub(began)
	fixed := map[int]int{}
	for i, at := range times {
		fixed[int(at.Sub(first)/time.Second)]++
		j := i
		for j < len(times) && times[j].Sub(at) < time.Second {
			j++
		}
		m.maxSliding = max(m.maxSliding, j-i)
	}
	for i := range int(m.span/time.Second) + 1 {
		m.windows = append(m.windows, fixed[i])
		m.maxFixed = max(m.maxFixed, fixed[i])
	}
	rows, err := h.pool.Query(context.Background(), `SELECT owner, sum(requests), sum(rate_limit_waits) FROM sync_runs GROUP BY owner`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var owner string
		var req, waits int
		if err := rows.Scan(&owner, &req, &waits); err != nil {
			t.Fatal(err)
		}
		m.perReplica[owner] = req
		m.waits += waits
	}
	return m
}

// check asserts the measure against the token bucket: in any one-second
// window at most burst + per_second requests, overall at most burst +
// per_second x the time since the replicas started (taken), plus one per
// replica for network timing (measureHost waits for enough requests that
// the budget, not idleness, was the bound).
func (m hostMeasure) check(t *testing.T, sc hostScenario) {
	t.Helper()
	// The upstream counts requests when they arrive, the budget when they
	// are taken: a replica checks the host's block between the two (a
	// query), so each replica may hold one taken request that arrives
	// later than its token says, at either edge of a window.
	slack := sc.replicas
	if m.maxSliding > m.bound+slack {
		t.Errorf("%d requests in one second; the host budget allows %d (burst %g + %g/s) and one in flight per replica", m.maxSliding, m.bound, sc.hostBurst, sc.hostRate)
	}
	// Every request counted took its token between the replicas' start and
	// its arrival: the first request's own wait for a busy machine is in
	// that time, not in span.
	if limit := sc.hostBurst + sc.hostRate*m.taken.Seconds() + float64(slack); float64(m.requests) > limit {
		t.Errorf("%d requests arrived in %s, their tokens taken within %s of the replicas' start; the host budget allows %.0f", m.requests, m.span, m.taken, limit)
	}
	if len(m.perReplica) != sc.replicas {
		t.Errorf("%d replicas sent requests, want %d: %v", len(m.perReplica), sc.replicas, m.perReplica)
	}
	if m.waits == 0 {
		t.Errorf("no rate_limit_waits recorded")
	}
}

// TestHostBudgetShared: two sources on one host, run by two replicas,
// together stay within the host's budget.
func TestHostBudgetShared(t *testing.T) {
	t.Parallel()
	sc := hostScenario{replicas: 2, sources: 2, sourceRate: 100, hostRate: 5, hostBurst: 2, duration: 2 * time.Second}
	m := measureHost(t, sc)
	t.Logf("%d requests in %s, max %d in a second (fixed windows %d); limit %g/s burst %g; per replica %v",
		m.requests, m.span.Round(time.Millisecond), m.maxSliding, m.maxFixed, sc.hostRate, sc.hostBurst, m.perReplica)
	m.check(t, sc)
}

// TestHostRateReport is the measurement for the docs: ten feeds on one
// server, each allowed 2/s (20/s together), run by three replicas against
// a host budget of 5/s, burst 5. Run with -v to see the figures.
func TestHostRateReport(t *testing.T) {
	t.Parallel()
	sc := hostScenario{replicas: 3, sources: 10, sourceRate: 2, hostRate: 5, hostBurst: 5, duration: 4 * time.Second}
	m := measureHost(t, sc)
	t.Logf("host rate report: %d sources x %g/s on %d replicas, host limit %g/s burst %g, measured until the budget of %s (burst + %s x per_second) was sent: %s",
		sc.sources, sc.sourceRate, sc.replicas, sc.hostRate, sc.hostBurst, sc.duration, sc.duration, m.span.Round(time.Millisecond))
	t.Logf("  requests %d, average %.2f/s, highest in one second: %d sliding / %d fixed windows (bucket allows %d); without the host budget the sources would send %g/s",
		m.requests, float64(m.requests)/m.span.Seconds(), m.maxSliding, m.maxFixed, m.bound, sc.sourceRate*float64(sc.sources))
	steady := 0
	for _, c := range m.windows[1:] {
		steady += c
	}
	t.Logf("  requests per second %v: after the first second (which holds the burst) %.2f/s", m.windows, float64(steady)/float64(len(m.windows)-1))
	t.Logf("  per replica %v, rate_limit_waits %d", m.perReplica, m.waits)
	m.check(t, sc)
}

// TestWaitBeyondRequestDeadlineDefers: a connector that bounds each
// request with its own timeout must not see a rate-limit wait turn into a
// timeout failure: the run is deferred instead, naming the request's
// deadline. The second page's wait (the source's second token, 10,000 s
// away) is longer than syncer.max_wait (1 h), which is longer than the
// request's deadline (1 min): only a wait bounded by the deadline gives
// that reason, and no stall of the machine changes the order. (It used a
// 100 ms request deadline and a 500 ms wait: a first page slower than
// 100 ms failed the run, one slower than 500 ms found its token ready.)
func TestWaitBeyondRequestDeadlineDefers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	up := newUpstream(t, 2, time.Now)
	fetch := func(ctx context.Context, env connectors.Env, cur json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		for page := 1; page <= 2; page++ {
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, fmt.Sprintf("%s/s/page/%d", up.URL, page), nil)
			resp, err := env.HTTP.Do(req)
			if err != nil {
				cancel()
				return connectors.Result{}, fmt.Errorf("page %d: %w", page, err)
			}
			resp.Body.Close()
			cancel()
		}
		return connectors.Result{}, nil
	}
	cfg := loadConfig(t, "defaults: {host_rate_limit: {per_second: 1000, burst: 100}}\n", map[string]string{
		"s": "every: 1h\njitter: 0s\nrate_limit: {per_second: 0.0001, burst: 1}\n",
	}, map[string]fetchFunc{"s": fetch})
	s := h.syncer(cfg, Config{Now: time.Now, MaxWait: time.Hour})
	h.runDue(s)
	runs := h.runs("s")
	if r := runs[0]; r.Status != "deferred" || !strings.Contains(r.Error, "before the request's deadline") {
		t.Fatalf("run: %+v", r)
	}
	if r := h.source("s"); r.Failures != 0 {
		t.Errorf("failures %d", r.Failures)
	}
	if n := up.total.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}
