package httpjson_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/httpjson"
	"github.com/lookout-dev/lookout/internal/normalize"
)

// ticketPage renders a page of n tickets as internal/bench NewAPI does.
func ticketPage(n int) []byte {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b strings.Builder
	b.WriteString(`{"data":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		ts := base.Add(time.Duration(i) * time.Minute).Format(time.RFC3339)
		fmt.Fprintf(&b, `{"id":%d,"title":"Ticket %d: printer on floor %d is jammed again","body":"Reported by the front desk. The printer shows error E%d and the tray is stuck; please check the rollers and replace the toner if needed.","url":"https://tickets.example.com/t/%d","author":"user%d","status":"%s","labels":["facilities","floor-%d"],"created_at":"%s","updated_at":"%s","priority":%d,"assignee":"agent%d"}`,
			i, i, i%12, i%97, i, i%500, []string{"open", "pending", "closed"}[i%3], i%12, ts, ts, i%4, i%40)
	}
	b.WriteString(`],"links":{"next":null}}`)
	return []byte(b.String())
}

// BenchmarkFetchMapPage fetches one page of 1,000 tickets from a local
// server with the bench's block (items: body.data) and maps every item as
// the syncer does.
func BenchmarkFetchMapPage(b *testing.B) {
	page := ticketPage(1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(page)
	}))
	defer srv.Close()
	items, err := normalize.Compile("body.data", "body", "headers")
	if err != nil {
		b.Fatal(err)
	}
	conn, err := httpjson.New(srv.Client(), httpjson.Options{URL: srv.URL + "/tickets", Items: items})
	if err != nil {
		b.Fatal(err)
	}
	m, err := normalize.NewMapper(normalize.FieldExprs{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		_, err := conn.Fetch(ctx, nil, func(_ context.Context, p connectors.Page) error {
			for _, it := range p.Items {
				if _, err := m.Map(it.Value, it.Raw); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if n != 1000 {
			b.Fatalf("mapped %d items, want 1000", n)
		}
	}
}

// TestItemLocations checks that every item is located by its page's URL
// and its index: what item errors and duplicate-id errors name.
func TestItemLocations(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(ticketPage(12))
	}))
	t.Cleanup(srv.Close)
	items, err := normalize.Compile("body.data", "body", "headers")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := httpjson.New(srv.Client(), httpjson.Options{URL: srv.URL + "/tickets?page=1", Items: items})
	if err != nil {
		t.Fatal(err)
	}
	var locs []string
	_, err = conn.Fetch(context.Background(), nil, func(_ context.Context, p connectors.Page) error {
		for _, it := range p.Items {
			locs = append(locs, it.Loc)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(locs) != 12 || locs[0] != srv.URL+"/tickets?page=1 [0]" || locs[11] != srv.URL+"/tickets?page=1 [11]" {
		t.Errorf("item locations = %q, want %s/tickets?page=1 [0] to [11]", locs, srv.URL)
	}
}
