package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	_ "github.com/lookout-dev/lookout/internal/connectors/rss"
	"github.com/lookout-dev/lookout/internal/metrics"
)

// loadFeeds writes a configuration directory of n rss sources, one file
// each, as measurement (13) of docs/benchmarks.md does (every: 1h), with
// body added to every file, and loads it.
func loadFeeds(t testing.TB, n int, body func(i int) string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		y := fmt.Sprintf("name: feed-%05d\nconnector: rss\nevery: 1h\nrss:\n  url: http://127.0.0.1:1/feeds/%d.xml\n%s", i, i, body(i))
		if err := os.WriteFile(filepath.Join(dir, "sources", fmt.Sprintf("feed-%05d.yaml", i)), []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatalf("load config: %v", err)
	}
	return cfg
}

// heapInUse is the heap in use after two collections.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// The state a syncer keeps for a source (what it reads of the
// definition, connector, mapper, schedule, HTTP client, rate limit,
// logger, the metrics' part) is small: a million sources fit in 2 GB
// (issue 24). Measured as the heap a syncer of 2,000 rss sources holds
// once the parsed configuration is dropped, as the daemon drops it
// (cli.ApplyConfig, then the follower's delta): the parsed definitions
// a source would keep count. Not parallel: the other tests' allocations
// would count.
func TestBuiltSourceStateIsSmall(t *testing.T) {
	const n = 2000
	m := metrics.New()
	before := heapInUse()
	cfg := loadFeeds(t, n, func(int) string { return "" })
	conf := FromConfig(cfg)
	conf.Owner, conf.Metrics = "memory", m
	s, err := New(nil, conf, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// The daemon's configuration keeps its global settings, not its
	// sources (cli.ApplyConfig).
	cfg.Sources, conf.Sources = nil, nil
	after := heapInUse()
	runtime.KeepAlive(s)
	runtime.KeepAlive(cfg)
	per := float64(int64(after)-int64(before)) / n
	t.Logf("a syncer holds %.0f bytes per source (%d sources)", per, n)
	// 2,144 B when a source kept its parsed definition whole
	// (source.cfg, and the syncer's conf.Sources) and the metrics a map
	// of source to connector; 552 B since it keeps the few keys it reads
	// (source 112, client and transport 128, connector 64, logger 48,
	// the sources map and names 73, its name, hash, path and URL
	// strings).
	if per > 600 {
		t.Errorf("the syncer keeps %.0f bytes per source, want at most 600", per)
	}
}

// Sources alike share what they can: one Mapper per distinct mapping, one
// Schedule per distinct schedule; sources that differ do not.
func TestSourcesAlikeShareMapperAndSchedule(t *testing.T) {
	t.Parallel()
	cfg := loadFeeds(t, 4, func(i int) string {
		switch i {
		case 2:
			return "fields:\n  title: item.title + '!'\n"
		case 3:
			return "jitter: 1m\n"
		}
		return ""
	})
	s, err := New(nil, FromConfig(cfg), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a, b, mapped, jittered := s.sources["feed-00000"], s.sources["feed-00001"], s.sources["feed-00002"], s.sources["feed-00003"]
	if a.mapper != b.mapper || a.mapper != jittered.mapper {
		t.Error("two sources with the same fields hold two mappers")
	}
	if a.mapper == mapped.mapper {
		t.Error("a source with other fields shares the mapper of the default fields")
	}
	if a.schedule != b.schedule || a.schedule != mapped.schedule {
		t.Error("two sources with the same schedule hold two schedules")
	}
	if a.schedule == jittered.schedule {
		t.Error("a source with another jitter shares the schedule of the default jitter")
	}
}

// Each source has its own small transport (its rate limit), over the
// part every source of its egress policy shares; its token bucket is made
// by its first request.
func TestSourcesShareTheirTransportsBase(t *testing.T) {
	t.Parallel()
	nop := func(context.Context, connectors.Env, json.RawMessage, connectors.EmitFunc) (connectors.Result, error) {
		return connectors.Result{}, nil
	}
	cfg := loadConfig(t, "", map[string]string{"a": "", "b": ""}, map[string]fetchFunc{"a": nop, "b": nop})
	s, err := New(nil, FromConfig(cfg), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ta, tb := transportOf(t, s.sources["a"]), transportOf(t, s.sources["b"])
	if ta == tb {
		t.Fatal("two sources share one transport: their rate limits would be one")
	}
	if ta.transportShared != tb.transportShared || ta.transportShared != s.trusted {
		t.Error("two sources of one egress policy hold two shared transports")
	}
	if ta.limiter.Load() != nil {
		t.Error("a source not run yet holds a token bucket")
	}
	if la := ta.sourceLimiter(); la != ta.sourceLimiter() || la == tb.sourceLimiter() {
		t.Error("a source's token bucket is not its own, made once")
	}
}

// transportOf is the politeTransport of a built fake source's client.
func transportOf(t *testing.T, src *source) *politeTransport {
	t.Helper()
	tr, ok := src.conn.(*fakeConn).env.HTTP.Transport.(*politeTransport)
	if !ok {
		t.Fatalf("transport %T", src.conn.(*fakeConn).env.HTTP.Transport)
	}
	return tr
}
