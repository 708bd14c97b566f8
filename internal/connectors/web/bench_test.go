package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/web"
)

// benchCheck measures one quiet check of the booking page: the run that
// finds nothing new. etag: the site answers 304 to the conditional GET;
// without, it sends the whole page again, which is read, parsed and
// extracted (the records come out the same, so the syncer writes nothing).
func benchCheck(b *testing.B, etag bool, blk func(url string) string) {
	benchPage(b, fixture(b, "slots.html"), etag, blk)
}

// bigSlots is the booking page with 1,000 slot rows (about 200 KB).
func bigSlots(b *testing.B) []byte {
	page := string(fixture(b, "slots.html"))
	start, end := strings.Index(page, "<tr class=\"slot available\""), strings.Index(page, "</tbody>")
	row := page[start:end]
	var rows strings.Builder
	for i := range 1000 {
		rows.WriteString(strings.ReplaceAll(row, "2026-12-0", fmt.Sprintf("r%d-2026-12-0", i)))
	}
	return []byte(page[:start] + rows.String() + page[end:])
}

func benchPage(b *testing.B, page []byte, etag bool, blk func(url string) string) {
	b.SetBytes(int64(len(page)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		if etag {
			w.Header().Set("ETag", `"v1"`)
			if r.Header.Get("If-None-Match") == `"v1"` {
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	}))
	b.Cleanup(srv.Close)
	conn := build(b, blk(srv.URL+"/slots/"))
	var cursor json.RawMessage
	emit := func(_ context.Context, p connectors.Page) error { cursor = p.Cursor; return nil }
	ctx := context.Background()
	if _, err := conn.Fetch(ctx, nil, emit); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	before, children := cpuTime(b), childrenCPU(b)
	n := 0
	for b.Loop() {
		_, err := conn.Fetch(ctx, cursor, emit)
		if err != nil && !errors.Is(err, connectors.ErrNotModified) {
			b.Fatal(err)
		}
		n++
	}
	// The wall time of a check on a shared machine is not its cost: the
	// process's CPU time (the test server's side included) is.
	b.ReportMetric(float64(cpuTime(b)-before)/float64(time.Millisecond)/float64(n), "cpu-ms/op")
	if c := childrenCPU(b) - children; c > 0 {
		b.ReportMetric(float64(c)/float64(time.Millisecond)/float64(n), "chromium-cpu-ms/op")
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func itemsBlock(url string) string {
	return block("url: "+url, `items: "table.slots tr.slot"`, `id: "@data-slot-id"`, "fields:", "  title: td.when", `  link: "a.book@href"`, "remove: [.ad-banner]")
}

func pageBlock(url string) string { return block("url: "+url, "remove: [p.updated]") }

func BenchmarkQuietCheck304(b *testing.B)        { benchCheck(b, true, itemsBlock) }
func BenchmarkQuietCheckItems(b *testing.B)      { benchCheck(b, false, itemsBlock) }
func BenchmarkQuietCheckWholePage(b *testing.B)  { benchCheck(b, false, pageBlock) }
func BenchmarkQuietCheckItemsLarge(b *testing.B) { benchPage(b, bigSlots(b), false, itemsBlock) }
func BenchmarkQuietCheckWholePageLarge(b *testing.B) {
	benchPage(b, bigSlots(b), false, pageBlock)
}

// BenchmarkQuietCheckBrowser renders the booking page in the shared
// Chromium (render: browser, 100ms of network idle). cpu-ms/op counts
// this process; chromium-cpu-ms/op the browser's processes, those that
// exited (each render's tab) included (started by the first, unmeasured
// check).
func BenchmarkQuietCheckBrowser(b *testing.B) {
	if _, err := exec.LookPath("chromium"); err != nil {
		b.Skip("no chromium on PATH")
	}
	b.Cleanup(web.CloseBrowser)
	benchPage(b, fixture(b, "slots.html"), false, func(url string) string {
		return itemsBlock(url) + block("render: browser", "wait: {idle: 100ms}")
	})
}

// childrenCPU is the user and system CPU time of this process's
// descendants (the browser), read from /proc: of those that run, and of
// the children they waited for (cutime, cstime: a tab's renderer
// process that exited is counted in the process that reaped it).
func childrenCPU(b *testing.B) time.Duration {
	parent := map[int]int{}
	ticks := map[int]int64{}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		b.Skip("no /proc")
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		var sum int64
		for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
			v, _ := strconv.ParseInt(f[i], 10, 64)
			sum += v
		}
		parent[pid], ticks[pid] = ppid, sum
	}
	self := os.Getpid()
	var total int64
	for pid, t := range ticks {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == self {
				total += t
				break
			}
		}
	}
	return time.Duration(total) * (time.Second / 100) // USER_HZ
}
