package syncer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// countingUpstream is an HTTP JSON API of many sources, GET /s/{name}:
// one item whose version changes every changeEvery-th request of the
// source, with an ETag, answering 304 to a request that names the current
// one. It counts requests and, per source, requests in flight: two at
// once are an overlap, two runs of one source at the same time.
type countingUpstream struct {
	*httptest.Server
	changeEvery int64

	mu       sync.Mutex
	state    map[string]*sourceCount
	overlaps atomic.Int64
}

type sourceCount struct {
	inFlight, requests atomic.Int64
}

func newCountingUpstream(t *testing.T, changeEvery int64) *countingUpstream {
	u := &countingUpstream{changeEvery: changeEvery, state: map[string]*sourceCount{}}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *countingUpstream) count(name string) *sourceCount {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.state[name]
	if c == nil {
		c = &sourceCount{}
		u.state[name] = c
	}
	return c
}

func (u *countingUpstream) serve(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/s/")
	c := u.count(name)
	if c.inFlight.Add(1) > 1 {
		u.overlaps.Add(1)
	}
	defer c.inFlight.Add(-1)
	n := c.requests.Add(1)
	version := (n - 1) / u.changeEvery
	etag := fmt.Sprintf(`"v%d"`, version)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"items": [{"id": "%s", "title": "version %d"}]}`, name, version)
}

// TestReplicasNeverOverlapAtScale runs three syncers in one process on
// 300 sources due every 20 ms (15,000 runs/s demanded: the replicas run
// flat out, claims contend on every row; 20 slots each, so that no one
// replica takes every due source) against an upstream that counts
// the requests in flight per source. No source is ever fetched twice at
// once; every request the upstream saw belongs to exactly one recorded or
// quiet run; every replica ran sources; most runs were quiet.
func TestReplicasNeverOverlapAtScale(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	pgtest.SkipOnCitus(t, h.pool, "1,500 runs at 15,000 runs/s demanded; the 3-node cluster on one 2-core machine ran about 1.3 runs/s at load 40 "+
		"(TestThreeReplicasNeverOverlap checks the same guarantee there on 9 sources)")
	const nSources, minRuns = 300, 5
	up := newCountingUpstream(t, 4)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	global := "defaults: {rate_limit: {per_second: 100000, burst: 100}}\n" // a loopback host: no shared budget
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range nSources {
		name := fmt.Sprintf("s%03d", i)
		y := fmt.Sprintf("name: %s\nconnector: http\nhttp: {url: %q, items: body.items}\nevery: 20ms\njitter: 20ms\n", name, up.URL+"/s/"+name)
		if err := os.WriteFile(filepath.Join(dir, "sources", name+".yaml"), []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var replicas []*Syncer
	for _, owner := range []string{"replica-a", "replica-b", "replica-c"} {
		s := h.syncer(cfg, Config{Owner: owner, Now: time.Now, Lease: time.Minute, Concurrency: 20})
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, s)
	}
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			for _, s := range replicas {
				if err := s.Stop(); err != nil {
					t.Errorf("stop: %v", err)
				}
			}
		})
	}
	t.Cleanup(stop)
	testsignal.EventuallyWithin(t, 90*time.Second, fmt.Sprintf("every source to be fetched %d times", minRuns), func() bool {
		up.mu.Lock()
		defer up.mu.Unlock()
		if len(up.state) < nSources {
			return false
		}
		for _, c := range up.state {
			if c.requests.Load() < minRuns {
				return false
			}
		}
		return true
	})
	stop()

	if o := up.overlaps.Load(); o != 0 {
		t.Errorf("%d requests arrived while another request of the same source was in flight", o)
	}
	ctx := context.Background()
	// Per source: the requests the upstream saw are the requests of its
	// recorded runs plus those of its quiet runs (a request cut off by the
	// final Stop may be counted by the run and not reach the upstream).
	rows, err := h.pool.Query(ctx, `
		SELECT s.name,
		       coalesce((SELECT sum(requests) FROM sync_runs r WHERE r.source = s.name), 0)::bigint,
		       coalesce((SELECT sum(requests) FROM sync_run_hours q WHERE q.source = s.name), 0)::bigint,
		       coalesce((SELECT sum(runs) FROM sync_run_hours q WHERE q.source = s.name), 0)::bigint
		FROM sources s`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var quietRuns, recordedRequests, quietRequests int64
	for rows.Next() {
		var name string
		var rec, quiet, runs int64
		if err := rows.Scan(&name, &rec, &quiet, &runs); err != nil {
			t.Fatal(err)
		}
		seen := up.count(name).requests.Load()
		if seen > rec+quiet || seen < rec+quiet-3 {
			t.Errorf("%s: the upstream saw %d requests, the runs recorded %d + %d quiet", name, seen, rec, quiet)
		}
		quietRuns += runs
		recordedRequests += rec
		quietRequests += quiet
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Every replica ran sources (its last summary line counts its runs).
	for _, owner := range []string{"replica-a", "replica-b", "replica-c"} {
		if !regexp.MustCompile(`msg="syncer stopped" .*owner=` + owner + ` .*runs=[1-9]`).MatchString(h.logs.String()) {
			t.Errorf("%s ran nothing in its last window", owner)
		}
	}
	var overlapping, lost int64
	if err := h.pool.QueryRow(ctx, `SELECT count FROM report_ran_twice WHERE finding = 'overlapping_runs'`).Scan(&overlapping); err != nil {
		t.Fatal(err)
	}
	if overlapping != 0 {
		t.Errorf("report_ran_twice: %d overlapping runs", overlapping)
	}
	if err := h.pool.QueryRow(ctx, `
		SELECT count(*) FROM sync_runs WHERE status = 'abandoned' AND error NOT LIKE 'interrupted by shutdown%'`).Scan(&lost); err != nil {
		t.Fatal(err)
	}
	if lost != 0 {
		t.Errorf("%d runs lost their lease (want 0)", lost)
	}
	if quietRuns == 0 || quietRequests < recordedRequests {
		t.Errorf("%d quiet runs (%d requests) beside %d requests of recorded runs: most runs should be quiet", quietRuns, quietRequests, recordedRequests)
	}
	t.Logf("%d quiet runs, %d requests of recorded runs", quietRuns, recordedRequests)
}
