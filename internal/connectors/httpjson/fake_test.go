package httpjson_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// ticket is one record of the fake tickets API.
type ticket struct {
	ID      int64
	Title   string
	Status  string
	Updated time.Time
}

// fakeAPI is a paginated JSON API in the manner of common ticketing APIs:
// GET /tickets lists tickets ordered by updated_at then id, filtered by
// updated_since (inclusive), paged by page number, Link header, a next link
// in the body or an opaque cursor; it sends a strong ETag and honours
// If-None-Match.
type fakeAPI struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	tickets  []ticket
	pageSize int
	mode     string // page, link, next, cursor, none
	// intercept may answer a request itself (429, 500, ...): n counts
	// requests from 1.
	intercept func(w http.ResponseWriter, r *http.Request, n int) bool
	// headers are added to every 200 answer.
	headers  http.Header
	requests []*http.Request
}

func newFakeAPI(t *testing.T, mode string, n int) *fakeAPI {
	f := &fakeAPI{t: t, mode: mode, pageSize: 3, headers: http.Header{}}
	base := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	for i := 1; i <= n; i++ {
		f.tickets = append(f.tickets, ticket{ID: int64(i), Title: fmt.Sprintf("Ticket %d", i), Status: "open", Updated: base.Add(time.Duration(i) * time.Minute)})
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) URL() string { return f.srv.URL + "/tickets" }

// set replaces or adds a ticket.
func (f *fakeAPI) set(tk ticket) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.tickets {
		if f.tickets[i].ID == tk.ID {
			f.tickets[i] = tk
			return
		}
	}
	f.tickets = append(f.tickets, tk)
}

func (f *fakeAPI) remove(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tickets = slices.DeleteFunc(f.tickets, func(t ticket) bool { return t.ID == id })
}

func (f *fakeAPI) ticket(id int64) ticket {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.tickets {
		if t.ID == id {
			return t
		}
	}
	f.t.Fatalf("no ticket %d", id)
	return ticket{}
}

// log returns the requests received so far.
func (f *fakeAPI) log() []*http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Clone(r.Context()))
	n := len(f.requests)
	intercept := f.intercept
	f.mu.Unlock()
	if intercept != nil && intercept(w, r, n) {
		return
	}
	if r.URL.Path != "/tickets" {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	list := slices.Clone(f.tickets)
	mode, size := f.mode, f.pageSize
	for k, v := range f.headers {
		w.Header()[k] = v
	}
	f.mu.Unlock()
	q := r.URL.Query()
	if s := q.Get("updated_since"); s != "" {
		since, err := time.Parse(time.RFC3339, s)
		if err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":"invalid updated_since %q"}`, s)
			return
		}
		list = slices.DeleteFunc(list, func(t ticket) bool { return t.Updated.Before(since) })
	}
	slices.SortFunc(list, func(a, b ticket) int {
		if c := a.Updated.Compare(b.Updated); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	offset := 0
	switch mode {
	case "page", "link", "next":
		if p := q.Get("page"); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 {
				http.Error(w, `{"error":"bad page"}`, http.StatusBadRequest)
				return
			}
			offset = (n - 1) * size
		}
	case "cursor":
		if c := q.Get("cursor"); c != "" {
			b, err := base64.RawURLEncoding.DecodeString(c)
			if err != nil {
				http.Error(w, `{"error":"cursor expired"}`, http.StatusGone)
				return
			}
			offset, _ = strconv.Atoi(string(b))
		}
	case "none":
		size = len(list) + 1
	}
	end := min(offset+size, len(list))
	if offset > len(list) {
		offset = len(list)
	}
	page := list[offset:end]
	more := end < len(list)
	items := make([]map[string]any, len(page))
	for i, t := range page {
		items[i] = map[string]any{"id": t.ID, "title": t.Title, "status": t.Status, "updated_at": t.Updated.Format(time.RFC3339)}
	}
	body := map[string]any{"data": items}
	nextURL := func() string {
		u := *r.URL
		qq := u.Query()
		qq.Set("page", strconv.Itoa(offset/size+2))
		u.RawQuery = qq.Encode()
		return u.String()
	}
	switch mode {
	case "link":
		if more {
			w.Header().Add("Link", fmt.Sprintf(`<%s%s>; rel="next", <%s/tickets?page=1>; rel="first"`, f.srv.URL, nextURL(), f.srv.URL))
		}
	case "next":
		var next any
		if more {
			next = nextURL() // relative: /tickets?page=2
		}
		body["links"] = map[string]any{"next": next}
	case "cursor":
		var next any
		if more {
			next = base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(end)))
		}
		body["meta"] = map[string]any{"next_cursor": next, "has_more": more}
	}
	data, _ := json.Marshal(body)
	sum := sha256.Sum256(data)
	etag := `"` + hex.EncodeToString(sum[:8]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(data)
}

// query returns the query of request i (0-based).
func query(t *testing.T, reqs []*http.Request, i int) url.Values {
	t.Helper()
	if i >= len(reqs) {
		t.Fatalf("want at least %d requests, got %d", i+1, len(reqs))
	}
	return reqs[i].URL.Query()
}
