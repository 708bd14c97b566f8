package rss_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// feedServer serves one document the way a web server or CDN serves a
// static feed: strong ETag, Last-Modified, 304 for matching validators.
type feedServer struct {
	srv *httptest.Server

	mu        sync.Mutex
	body      []byte
	ctype     string
	modified  time.Time
	requests  []*http.Request
	parsed304 int
	intercept func(w http.ResponseWriter, r *http.Request) bool
}

func newFeedServer(t *testing.T, file, ctype string) *feedServer {
	t.Helper()
	f := &feedServer{ctype: ctype, modified: time.Date(2026, 3, 3, 14, 5, 11, 0, time.UTC)}
	f.setBody(t, readFile(t, file))
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *feedServer) setBody(t *testing.T, b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.body = b
	f.modified = f.modified.Add(time.Hour)
}

func (f *feedServer) log() []*http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func (f *feedServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Clone(r.Context()))
	body, mod, intercept := f.body, f.modified, f.intercept
	f.mu.Unlock()
	if intercept != nil && intercept(w, r) {
		return
	}
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:6]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Last-Modified", mod.Format(http.TimeFormat))
	w.Header().Set("Cache-Control", "max-age=300")
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", f.ctype)
	_, _ = w.Write(body)
}

func build(t *testing.T, url string) connectors.Connector {
	t.Helper()
	src := fmt.Sprintf("name: feed\nconnector: rss\ntimeout: 2s\nrss:\n  url: %s\n  headers: {User-Agent: lookout-test}\n", url)
	dir := conntest.WriteConfig(t, map[string]string{"sources/feed.yaml": src})
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connectors.New(cfg.Sources[0], connectors.Env{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func TestRSS2Blog(t *testing.T) {
	t.Parallel()
	f := newFeedServer(t, "blog.rss", "application/rss+xml; charset=UTF-8")
	conn := build(t, f.srv.URL+"/feed/")
	r := conntest.Fetch(t, conn, nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	items := r.Items()
	if len(items) != 4 {
		t.Fatalf("got %d items, want 4", len(items))
	}
	post := items[0]
	want := map[string]any{
		"id":         "https://blog.example.com/?p=4211", // guid isPermaLink="false"
		"title":      "Postgres 17 upgrade: what we learned",
		"url":        "https://blog.example.com/2026/03/postgres-17-upgrade/",
		"author":     "Ada Lovelace", // dc:creator
		"created_at": "2026-03-03T14:00:00Z",
	}
	for k, v := range want {
		if post[k] != v {
			t.Errorf("post %s = %v, want %v", k, post[k], v)
		}
	}
	if body, _ := post["body"].(string); !strings.HasPrefix(body, "<p>We moved <strong>40 clusters</strong>") || !strings.Contains(body, "&amp; nobody was paged") {
		t.Errorf("post body = %q, want the CDATA content:encoded", body)
	}
	if got := fmt.Sprint(post["labels"]); got != "[Databases Operations]" {
		t.Errorf("post labels = %s", got)
	}
	if _, ok := post["updated_at"]; ok {
		t.Errorf("RSS has no per-item updated time, got %v", post["updated_at"])
	}
	podcast := items[1]
	if podcast["id"] != "https://blog.example.com/podcast/12/" || podcast["body"] != "Our SREs talk about rotations, runbooks and sleep." {
		t.Errorf("podcast = %v", podcast)
	}
	if got := fmt.Sprint(podcast["enclosures"]); got != "[https://cdn.example.com/podcast/ep12.mp3]" {
		t.Errorf("podcast enclosures = %s", got)
	}
	job := items[2]
	if job["id"] != "https://blog.example.com/jobs/dbre/" || job["author"] != "Example Recruiting" {
		t.Errorf("an item without guid takes its link as id: %v", job)
	}
	notice := items[3]
	id, _ := notice["id"].(string)
	if !strings.HasPrefix(id, "sha256:") || len(id) != len("sha256:")+32 {
		t.Errorf("an item without guid or link takes a content hash as id, got %q", id)
	}
	if r.Result.MinInterval != 60*time.Minute {
		t.Errorf("MinInterval = %s, want the feed's ttl 60m", r.Result.MinInterval)
	}
	if r.Result.Complete {
		t.Error("a feed is incremental: Complete must be false")
	}
	// The content-hash id is stable across runs, and changes with the content.
	f.setBody(t, []byte(strings.Replace(string(readFile(t, "blog.rss")), "read-only", "offline", 1)))
	r2 := conntest.Fetch(t, conn, nil)
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	if got := r2.IDs(); got[0] != items[0]["id"] || got[3] == id {
		t.Errorf("ids after editing the notice = %v (before %s)", got, id)
	}
	r3 := conntest.Fetch(t, conn, nil)
	if r3.IDs()[3] != r2.IDs()[3] {
		t.Errorf("content-hash id is not stable: %s then %s", r2.IDs()[3], r3.IDs()[3])
	}
}

func TestAtom(t *testing.T) {
	t.Parallel()
	f := newFeedServer(t, "project.atom", "application/atom+xml")
	r := conntest.Fetch(t, build(t, f.srv.URL+"/blog/feed.atom"), nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	items := r.Items()
	if len(items) != 2 {
		t.Fatalf("got %d entries, want 2", len(items))
	}
	rel := items[0]
	want := map[string]any{
		"id":         "tag:project.example.org,2013:project.example.org/blog/example24",
		"title":      "Example 2.4 is released",
		"url":        "https://project.example.org/blog/example24", // rel=alternate, not rel=replies
		"author":     "Grace Hopper",
		"created_at": "2026-02-20T16:00:00Z",
		"updated_at": "2026-02-20T17:00:00Z",
		"body":       "<p>Today we released <a href=\"https://project.example.org/dl\">Example 2.4</a>.</p>\n<p>Builds are 30% faster.</p>",
	}
	for k, v := range want {
		if rel[k] != v {
			t.Errorf("entry %s = %q, want %q", k, rel[k], v)
		}
	}
	if got := fmt.Sprint(rel["labels"]); got != "[Releases performance]" { // label when present, else term
		t.Errorf("labels = %s, want the category labels, else terms", got)
	}
	design := items[1]
	if design["body"] != "Why we replaced the work-stealing queue." || design["url"] != "https://project.example.org/blog/scheduler" || design["updated_at"] != "2026-01-16T08:30:00Z" {
		t.Errorf("an entry without content takes its summary: %v", design)
	}
	if r.Result.MinInterval != 0 {
		t.Errorf("MinInterval = %s, Atom has no ttl", r.Result.MinInterval)
	}
}

func TestJSONFeed(t *testing.T) {
	t.Parallel()
	f := newFeedServer(t, "changelog.json", "application/feed+json")
	r := conntest.Fetch(t, build(t, f.srv.URL+"/feed.json"), nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	items := r.Items()
	if len(items) != 2 {
		t.Fatalf("got %d items, want 2", len(items))
	}
	inc := items[0]
	want := map[string]any{
		"id":         "incident-2026-03-02-api-latency",
		"title":      "Elevated API latency",
		"url":        "https://status.example.com/incidents/2026-03-02-api-latency",
		"body":       "<p>Resolved: a failing disk on a replica raised p99 latency.</p>",
		"author":     "Linus Torvalds",
		"created_at": "2026-03-02T15:15:00Z",
		"updated_at": "2026-03-02T16:02:00Z",
	}
	for k, v := range want {
		if inc[k] != v {
			t.Errorf("item %s = %q, want %q", k, inc[k], v)
		}
	}
	if got := fmt.Sprint(inc["labels"]); got != "[incident api]" {
		t.Errorf("labels = %s, want the tags", got)
	}
	if m := items[1]; m["id"] != "maintenance-2026-03-08" || !strings.HasPrefix(fmt.Sprint(m["body"]), "Writes pause") {
		t.Errorf("content_text item = %v", m)
	}
}

func TestConditionalRequestAnd304(t *testing.T) {
	t.Parallel()
	f := newFeedServer(t, "blog.rss", "application/rss+xml")
	conn := build(t, f.srv.URL+"/feed/")
	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	cur := r1.Cursor(nil)
	if !strings.Contains(string(cur), `"etag"`) || !strings.Contains(string(cur), `"last_modified"`) {
		t.Fatalf("cursor %s lacks the validators", cur)
	}
	r2 := conntest.Fetch(t, conn, cur)
	req := f.log()[1]
	if req.Header.Get("If-None-Match") == "" || req.Header.Get("If-Modified-Since") != "Tue, 03 Mar 2026 15:05:11 GMT" {
		t.Errorf("second request headers: If-None-Match %q If-Modified-Since %q", req.Header.Get("If-None-Match"), req.Header.Get("If-Modified-Since"))
	}
	if req.Header.Get("User-Agent") != "lookout-test" {
		t.Errorf("configured header not sent: User-Agent %q", req.Header.Get("User-Agent"))
	}
	if !errors.Is(r2.Err, connectors.ErrNotModified) || len(r2.Pages) != 0 {
		t.Fatalf("err %v pages %d, want ErrNotModified and nothing emitted", r2.Err, len(r2.Pages))
	}
	// A new post: a full response, with new validators.
	f.setBody(t, []byte(strings.Replace(string(readFile(t, "blog.rss")), "<title>Maintenance window</title>", "<title>Maintenance window (moved)</title>", 1)))
	r3 := conntest.Fetch(t, conn, cur)
	if r3.Err != nil || len(r3.Items()) != 4 || string(r3.Result.Cursor) == string(cur) {
		t.Fatalf("after a change: err %v items %d cursor %s", r3.Err, len(r3.Items()), r3.Result.Cursor)
	}
}

func TestFeedFailures(t *testing.T) {
	t.Parallel()
	retryAt := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	cases := []struct {
		name      string
		intercept func(w http.ResponseWriter, r *http.Request) bool
		check     func(t *testing.T, err error)
	}{
		{"html instead of a feed", func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<!doctype html><html><head><title>Login</title></head><body>Please sign in</body></html>")
			return true
		}, func(t *testing.T, err error) {
			if !strings.Contains(err.Error(), "malformed feed") || !strings.Contains(err.Error(), "/feed/") {
				t.Errorf("err = %v, want a malformed feed error naming the URL", err)
			}
		}},
		{"truncated XML", func(w http.ResponseWriter, r *http.Request) bool {
			fmt.Fprint(w, `<?xml version="1.0"?><rss version="2.0"><channel><title>x</title><item><title>cut`)
			return true
		}, func(t *testing.T, err error) {
			if !strings.Contains(err.Error(), "malformed feed") {
				t.Errorf("err = %v, want a malformed feed error", err)
			}
		}},
		{"503 with Retry-After date", func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Retry-After", retryAt.Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}, func(t *testing.T, err error) {
			var retry *connectors.RetryLaterError
			if !errors.As(err, &retry) || !retry.RetryAt.Equal(retryAt) {
				t.Errorf("err = %v, want RetryLaterError at %s", err, retryAt)
			}
		}},
		{"401", func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("WWW-Authenticate", `Basic realm="feeds"`)
			w.WriteHeader(http.StatusUnauthorized)
			return true
		}, func(t *testing.T, err error) {
			if !errors.Is(err, connectors.ErrUnauthorized) {
				t.Errorf("err = %v, want ErrUnauthorized", err)
			}
		}},
		{"500", func(w http.ResponseWriter, r *http.Request) bool {
			http.Error(w, "Internal Server Error", http.StatusInternalServerError)
			return true
		}, func(t *testing.T, err error) {
			if !strings.Contains(err.Error(), "500 Internal Server Error") || !strings.Contains(err.Error(), "/feed/") {
				t.Errorf("err = %v, want the status and the URL", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFeedServer(t, "blog.rss", "application/rss+xml")
			f.intercept = tc.intercept
			r := conntest.Fetch(t, build(t, f.srv.URL+"/feed/"), nil)
			if r.Err == nil {
				t.Fatal("Fetch succeeded, want an error")
			}
			if len(r.Pages) != 0 {
				t.Errorf("a failed fetch emitted %d pages", len(r.Pages))
			}
			tc.check(t, r.Err)
		})
	}
}

func TestDuplicateGUIDKeepsFirst(t *testing.T) {
	t.Parallel()
	doc := strings.Replace(string(readFile(t, "blog.rss")), `<guid isPermaLink="true">https://blog.example.com/podcast/12/</guid>`,
		`<guid isPermaLink="false">https://blog.example.com/?p=4211</guid>`, 1)
	f := newFeedServer(t, "blog.rss", "application/rss+xml")
	f.setBody(t, []byte(doc))
	r := conntest.Fetch(t, build(t, f.srv.URL+"/feed/"), nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.IDs(); len(got) != 3 || r.Items()[0]["title"] != "Postgres 17 upgrade: what we learned" {
		t.Errorf("ids = %v, want the repeated guid once (the first entry)", got)
	}
}

// Feed entries go through the default mapping into records; editing an
// entry is an update whose changed fields name what changed.
func TestFeedMirrorsIntoRecords(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	f := newFeedServer(t, "project.atom", "application/atom+xml")
	conn := build(t, f.srv.URL+"/blog/feed.atom")
	if st := conntest.Mirror(t, pool, "blog", normalize.FieldExprs{}, nil, conntest.Fetch(t, conn, nil)); st.Created != 2 {
		t.Fatalf("first run %+v, want 2 created", st)
	}
	doc := strings.Replace(string(readFile(t, "project.atom")), "<title>Example 2.4 is released</title>", "<title>Example 2.4.1 is released</title>", 1)
	doc = strings.Replace(doc, "<updated>2026-02-20T17:00:00+00:00</updated>\n    <author>", "<updated>2026-02-21T09:00:00+00:00</updated>\n    <author>", 1)
	f.setBody(t, []byte(doc))
	st := conntest.Mirror(t, pool, "blog", normalize.FieldExprs{}, nil, conntest.Fetch(t, conn, nil))
	if st.Updated != 1 || st.Unchanged != 1 {
		t.Fatalf("second run %+v, want 1 updated, 1 unchanged", st)
	}
	chs := conntest.Changes(t, pool, "blog")
	last := chs[len(chs)-1]
	if last.Kind != "updated" || !slices.Equal(last.ChangedFields, []string{"title", "updated_at"}) {
		t.Errorf("last change %s %v, want updated [title updated_at]", last.Kind, last.ChangedFields)
	}
	if last.Record["author"] != "Grace Hopper" || fmt.Sprint(last.Record["labels"]) != "[Releases performance]" {
		t.Errorf("record = %v", last.Record)
	}
}
