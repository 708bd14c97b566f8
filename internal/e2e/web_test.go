package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
)

// bookingPage is a booking table the way a venue's site serves it: one
// row per slot, its state in a cell, and a clock that changes on every
// request (removed by the source, so it makes no change).
type bookingPage struct {
	mu    sync.Mutex
	state map[string]string
	hits  int
}

func (b *bookingPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/slots" {
		http.NotFound(w, r) // robots.txt included: everything allowed
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hits++
	var rows strings.Builder
	for _, id := range []string{"sat-10", "sat-14"} {
		fmt.Fprintf(&rows, `<tr class="slot" data-slot-id="%s"><td class="when">%s</td><td class="state">%s</td></tr>`, id, id, b.state[id])
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, `<html><body><p class="clock">request %d</p><table class="slots">%s</table></body></html>`, b.hits, rows.String())
}

func (b *bookingPage) requests() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits
}

func (b *bookingPage) set(id, state string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state[id] = state
}

// A web source feeds a watch that notifies, through the real syncer and
// evaluator binaries: a booking slot that becomes available is notified
// once; the runs before (every slot full, a clock that changes on every
// request) notify nothing.
func TestWebSlotBecomesAvailable(t *testing.T) {
	t.Parallel()
	page := &bookingPage{state: map[string]string{"sat-10": "Fully booked", "sat-14": "Fully booked"}}
	srv := httptest.NewServer(page)
	t.Cleanup(srv.Close)
	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 100ms\n")
	e.write("sources/slots.yaml", `name: slots
connector: web
every: 1s
jitter: 0s
web:
  url: `+srv.URL+`/slots
  items: table.slots tr.slot
  id: "@data-slot-id"
  remove: [p.clock]
  fields:
    title: td.when
    status: td.state
watches:
  - name: slot-free
    when: record.status == "Available" && previous?.status != "Available"
`)
	s, ev := e.binaries()
	e.daemons = []*clitest.DaemonTest{s, ev}
	e.wait("the slots", 2, `SELECT count(*) FROM records WHERE source = 'slots'`)
	s.WaitFor("two quiet runs", func() bool { return page.requests() >= 3 })
	page.set("sat-14", "Available")
	e.wait("the notification", 1, `SELECT count(*) FROM notifications WHERE watch = 'slot-free' AND record_id = 'sat-14'`)
	if n := e.count(`SELECT count(*) FROM changes WHERE source = 'slots'`); n != 3 {
		t.Errorf("%d changes, want 3 (two created, one updated: the clock makes none)", n)
	}
	if n := e.count(`SELECT count(*) FROM notifications`); n != 1 {
		t.Errorf("%d notifications, want 1", n)
	}
}
