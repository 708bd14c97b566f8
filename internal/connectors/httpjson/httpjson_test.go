package httpjson_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/httpjson"
)

// build loads a source file with the given http block (YAML, indented by
// two spaces under "http:") and builds its connector the way the syncer does.
func build(t *testing.T, block string) connectors.Connector {
	t.Helper()
	return buildTimeout(t, "5s", block)
}

func buildTimeout(t *testing.T, timeout, block string) connectors.Connector {
	t.Helper()
	src := "name: t\nconnector: http\ntimeout: " + timeout + "\nhttp:\n" + block
	dir := conntest.WriteConfig(t, map[string]string{"sources/t.yaml": src})
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatalf("load config:\n%s\n%v", src, err)
	}
	conn, err := connectors.New(cfg.Sources[0], connectors.Env{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("build connector: %v", err)
	}
	return conn
}

func state(t *testing.T, raw json.RawMessage) httpjson.State {
	t.Helper()
	var st httpjson.State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("cursor %s: %v", raw, err)
	}
	return st
}

func TestPaginationModes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode  string
		block string
		reqs  int // requests for 7 items in pages of 3
	}{
		{"link", "  pagination: link\n", 3},
		{"next", "  next: body.links.next\n", 3},
		{"cursor", "  cursor: 'body.meta.has_more ? body.meta.next_cursor : nil'\n  cursor_param: cursor\n", 3},
		{"page", "  page_param: page\n", 4}, // the fourth page is empty: the end
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tc.mode, 7)
			conn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n%s", api.URL(), tc.block))
			r := conntest.Fetch(t, conn, nil)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if got, want := strings.Join(r.IDs(), ","), "1,2,3,4,5,6,7"; got != want {
				t.Errorf("ids = %s, want %s", got, want)
			}
			if r.Result.Requests != tc.reqs || len(api.log()) != tc.reqs {
				t.Errorf("requests = %d (server saw %d), want %d", r.Result.Requests, len(api.log()), tc.reqs)
			}
			if r.Result.Complete {
				t.Error("an incremental (non-snapshot) source must not be Complete")
			}
			st := state(t, r.Result.Cursor)
			if st.Resume != nil || st.Pages != tc.reqs {
				t.Errorf("final cursor = %s, want no resume and pages %d", r.Result.Cursor, tc.reqs)
			}
			// Every page but the last carries the resume point of the next.
			for i, p := range r.Pages[:len(r.Pages)-1] {
				if st := state(t, p.Cursor); st.Resume == nil || st.Resume.URL == "" {
					t.Errorf("page %d cursor %s has no resume point", i+1, p.Cursor)
				}
			}
		})
	}
}

func TestSinceSendsMaxUpdatedMinusLookback(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "link", 5)
	conn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n  pagination: link\n  since: updated_since\n  lookback: 2m\n", api.URL()))
	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	if q := query(t, api.log(), 0); q.Has("updated_since") {
		t.Errorf("first run sent updated_since=%s, want none", q.Get("updated_since"))
	}
	max := api.ticket(5).Updated
	if st := state(t, r1.Result.Cursor); st.MaxUpdatedAt != max.Format(time.RFC3339Nano) {
		t.Errorf("max_updated_at = %q, want %s", st.MaxUpdatedAt, max.Format(time.RFC3339))
	}
	n := len(api.log())
	r2 := conntest.Fetch(t, conn, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	if got, want := query(t, api.log(), n).Get("updated_since"), max.Add(-2*time.Minute).Format(time.RFC3339); got != want {
		t.Errorf("second run updated_since = %q, want %q (max updated_at minus 2m lookback)", got, want)
	}
	// Tickets 3 (updated max-2m), 4 and 5 are inside the window.
	if got := strings.Join(r2.IDs(), ","); got != "3,4,5" {
		t.Errorf("second run ids = %s, want 3,4,5", got)
	}
}

func TestRetryAfterPausesAndResumesFromCursor(t *testing.T) {
	t.Parallel()
	at := time.Now().Add(90 * time.Minute).UTC().Truncate(time.Second)
	cases := []struct {
		name   string
		status int
		header string
		want   func(time.Time) time.Time
	}{
		{"429 seconds", http.StatusTooManyRequests, "120", func(now time.Time) time.Time { return now.Add(120 * time.Second) }},
		{"503 http-date", http.StatusServiceUnavailable, at.Format(http.TimeFormat), func(time.Time) time.Time { return at }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, "link", 8)
			api.intercept = func(w http.ResponseWriter, r *http.Request, n int) bool {
				if n != 3 {
					return false
				}
				w.Header().Set("Retry-After", tc.header)
				w.WriteHeader(tc.status)
				fmt.Fprint(w, `{"error":"slow down"}`)
				return true
			}
			conn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n  pagination: link\n  since: updated_since\n", api.URL()))
			before := time.Now()
			r1 := conntest.Fetch(t, conn, nil)
			var retry *connectors.RetryLaterError
			if !errors.As(r1.Err, &retry) {
				t.Fatalf("err = %v, want a RetryLaterError", r1.Err)
			}
			if want := tc.want(before); retry.RetryAt.Before(want.Add(-time.Second)) || retry.RetryAt.After(tc.want(time.Now()).Add(time.Second)) {
				t.Errorf("RetryAt = %s, want %s", retry.RetryAt, want)
			}
			if got := strings.Join(r1.IDs(), ","); got != "1,2,3,4,5,6" {
				t.Errorf("ids before the pause = %s, want the first two pages", got)
			}
			cur := r1.Cursor(nil)
			st := state(t, cur)
			if st.Resume == nil || !strings.Contains(st.Resume.URL, "page=3") {
				t.Fatalf("committed cursor %s does not resume at page 3", cur)
			}

			api.intercept = nil
			n := len(api.log())
			r2 := conntest.Fetch(t, conn, cur)
			if r2.Err != nil {
				t.Fatal(r2.Err)
			}
			if q := query(t, api.log(), n); q.Get("page") != "3" {
				t.Errorf("resumed run asked for %s, want page 3", api.log()[n].URL)
			}
			if got := strings.Join(r2.IDs(), ","); got != "7,8" {
				t.Errorf("resumed run ids = %s, want 7,8", got)
			}
			fin := state(t, r2.Result.Cursor)
			if fin.Resume != nil || fin.MaxUpdatedAt != api.ticket(8).Updated.Format(time.RFC3339Nano) || fin.Pages != 3 {
				t.Errorf("final cursor = %s, want no resume, pages 3 and the max updated_at of the whole walk", r2.Result.Cursor)
			}
		})
	}
}

func TestRateLimitRemainingZeroPausesBeforeNextPage(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "link", 7)
	reset := time.Now().Add(10 * time.Minute).Unix()
	api.headers.Set("X-RateLimit-Limit", "60")
	api.headers.Set("X-RateLimit-Remaining", "0")
	api.headers.Set("X-RateLimit-Reset", fmt.Sprint(reset))
	conn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n  pagination: link\n", api.URL()))
	r := conntest.Fetch(t, conn, nil)
	var retry *connectors.RetryLaterError
	if !errors.As(r.Err, &retry) || retry.RetryAt.Unix() != reset {
		t.Fatalf("err = %v, want RetryLaterError at %d", r.Err, reset)
	}
	if len(api.log()) != 1 || len(r.IDs()) != 3 {
		t.Errorf("requests = %d, items = %d: want the first page emitted and no further request", len(api.log()), len(r.IDs()))
	}
	if st := state(t, r.Cursor(nil)); st.Resume == nil {
		t.Error("the page before the pause carries no resume point")
	}
}

func TestFailuresNameStatusPageAndURL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		intercept func(w http.ResponseWriter, r *http.Request, n int) bool
		check     func(t *testing.T, err error)
	}{
		{"500 on page 2", func(w http.ResponseWriter, r *http.Request, n int) bool {
			if n != 2 {
				return false
			}
			http.Error(w, "upstream exploded", http.StatusInternalServerError)
			return true
		}, func(t *testing.T, err error) {
			for _, want := range []string{"page 2", "500 Internal Server Error", "/tickets?page=2", "upstream exploded"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			var se *connectors.StatusError
			if !errors.As(err, &se) || se.Code != 500 {
				t.Errorf("error %v is not a StatusError 500", err)
			}
		}},
		{"malformed body on page 2", func(w http.ResponseWriter, r *http.Request, n int) bool {
			if n != 2 {
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"data": [{"id": 4, "title": "cut off`)
			return true
		}, func(t *testing.T, err error) {
			for _, want := range []string{"page 2", "/tickets?page=2", "malformed JSON body"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		}},
		{"401", func(w http.ResponseWriter, r *http.Request, n int) bool {
			w.Header().Set("WWW-Authenticate", `Bearer realm="api"`)
			http.Error(w, `{"error":"invalid token"}`, http.StatusUnauthorized)
			return true
		}, func(t *testing.T, err error) {
			if !errors.Is(err, connectors.ErrUnauthorized) || !strings.Contains(err.Error(), "401") {
				t.Errorf("err = %v, want ErrUnauthorized naming 401", err)
			}
		}},
		{"slow response", func(w http.ResponseWriter, r *http.Request, n int) bool {
			<-r.Context().Done() // never answers in time
			return true
		}, func(t *testing.T, err error) {
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no complete response within 300ms") || !strings.Contains(err.Error(), "/tickets") {
				t.Errorf("err = %v, want a timeout naming the URL and the limit", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, "link", 7)
			api.intercept = tc.intercept
			conn := buildTimeout(t, "300ms", fmt.Sprintf("  url: %s\n  items: body.data\n  pagination: link\n", api.URL()))
			start := time.Now()
			r := conntest.Fetch(t, conn, nil)
			if r.Err == nil {
				t.Fatal("Fetch succeeded, want an error")
			}
			if time.Since(start) > 10*time.Second {
				t.Errorf("Fetch took %s", time.Since(start))
			}
			tc.check(t, r.Err)
		})
	}
}

func TestETagRoundTripAndNotModified(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "none", 2)
	conn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n", api.URL()))
	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	st := state(t, r1.Result.Cursor)
	if st.ETag == "" || st.URL != api.URL() || st.Pages != 1 {
		t.Fatalf("cursor %s lacks the first page's ETag", r1.Result.Cursor)
	}
	r2 := conntest.Fetch(t, conn, r1.Cursor(nil))
	if got := api.log()[1].Header.Get("If-None-Match"); got != st.ETag {
		t.Errorf("If-None-Match = %q, want %q", got, st.ETag)
	}
	if !errors.Is(r2.Err, connectors.ErrNotModified) {
		t.Fatalf("err = %v, want ErrNotModified", r2.Err)
	}
	if len(r2.Pages) != 0 || r2.Result.Cursor != nil {
		t.Errorf("a 304 emitted %d pages and cursor %s, want nothing", len(r2.Pages), r2.Result.Cursor)
	}
	// A change upstream changes the ETag: the page is read again.
	tk := api.ticket(2)
	tk.Status = "closed"
	api.set(tk)
	r3 := conntest.Fetch(t, conn, r1.Cursor(nil))
	if r3.Err != nil || len(r3.Items()) != 2 || r3.Items()[1]["status"] != "closed" {
		t.Fatalf("after a change: err %v items %v", r3.Err, r3.Items())
	}
}

func TestValidatorsOnlyWhenA304ProvesNothingChanged(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, mode, block string }{
		{"several pages", "next", "  next: body.links.next\n"},
		{"link header", "link", "  pagination: link\n"}, // one page, but a next link could appear outside the body
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tc.mode, 3)
			if tc.mode == "next" {
				api.pageSize = 2
			}
			conn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n%s", api.URL(), tc.block))
			r1 := conntest.Fetch(t, conn, nil)
			if r1.Err != nil {
				t.Fatal(r1.Err)
			}
			n := len(api.log())
			r2 := conntest.Fetch(t, conn, r1.Cursor(nil))
			if r2.Err != nil {
				t.Fatal(r2.Err)
			}
			if h := api.log()[n].Header.Get("If-None-Match"); h != "" {
				t.Errorf("first page sent If-None-Match %q; a 304 would hide changes on later pages", h)
			}
		})
	}
}

func TestSnapshotCompleteOnlyForAWholeWalk(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "link", 7)
	conn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n  pagination: link\n  snapshot: true\n", api.URL()))
	r := conntest.Fetch(t, conn, nil)
	if r.Err != nil || !r.Result.Complete {
		t.Fatalf("whole walk: err %v complete %v, want complete", r.Err, r.Result.Complete)
	}
	// Interrupted on page 2, then resumed: the resumed run saw only part.
	api.intercept = func(w http.ResponseWriter, r *http.Request, n int) bool {
		if r.URL.Query().Get("page") != "2" {
			return false
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return true
	}
	r1 := conntest.Fetch(t, conn, r.Cursor(nil))
	var retry *connectors.RetryLaterError
	if !errors.As(r1.Err, &retry) {
		t.Fatalf("err = %v, want RetryLaterError", r1.Err)
	}
	api.intercept = nil
	r2 := conntest.Fetch(t, conn, r1.Cursor(r.Cursor(nil)))
	if r2.Err != nil || r2.Result.Complete {
		t.Errorf("resumed walk: err %v complete %v, want not complete", r2.Err, r2.Result.Complete)
	}
	if got := strings.Join(r2.IDs(), ","); got != "4,5,6,7" {
		t.Errorf("resumed walk ids = %s, want 4,5,6,7", got)
	}
	// The next run starts from the first page again and is complete.
	r3 := conntest.Fetch(t, conn, r2.Cursor(nil))
	if r3.Err != nil || !r3.Result.Complete || len(r3.IDs()) != 7 {
		t.Errorf("next walk: err %v complete %v ids %v", r3.Err, r3.Result.Complete, r3.IDs())
	}
}

func TestMaxPagesStopsAndNextRunContinues(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "link", 8)
	conn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n  pagination: link\n  max_pages: 2\n  since: updated_since\n", api.URL()))
	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil || len(api.log()) != 2 || len(r1.IDs()) != 6 {
		t.Fatalf("err %v requests %d ids %v, want two pages", r1.Err, len(api.log()), r1.IDs())
	}
	st := state(t, r1.Result.Cursor)
	if st.Resume == nil || !strings.Contains(st.Resume.URL, "page=3") {
		t.Fatalf("cursor after max_pages = %s, want a resume at page 3", r1.Result.Cursor)
	}
	r2 := conntest.Fetch(t, conn, r1.Cursor(nil))
	if r2.Err != nil || strings.Join(r2.IDs(), ",") != "7,8" {
		t.Fatalf("continued run: err %v ids %v", r2.Err, r2.IDs())
	}
	if st := state(t, r2.Result.Cursor); st.Resume != nil || st.MaxUpdatedAt != api.ticket(8).Updated.Format(time.RFC3339Nano) {
		t.Errorf("final cursor %s", r2.Result.Cursor)
	}
}

func TestStaleResumePointStartsOver(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "cursor", 5)
	conn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n  cursor: body.meta.next_cursor\n  cursor_param: cursor\n  snapshot: true\n", api.URL()))
	stale := fmt.Sprintf(`{"resume": {"url": %q, "run": {"pages": 1}}}`, api.URL()+"?cursor=%21%21expired")
	r := conntest.Fetch(t, conn, json.RawMessage(stale))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := strings.Join(r.IDs(), ","); got != "1,2,3,4,5" || !r.Result.Complete {
		t.Errorf("ids = %s complete = %v, want a whole walk from the first page", got, r.Result.Complete)
	}
}

func TestConfigErrorsAreLocated(t *testing.T) {
	t.Parallel()
	cases := []struct{ block, want string }{
		{"  url: http://x.test/a\n  items: body.data[\n", "sources/t.yaml:6: http.items expression"},
		{"  url: http://x.test/a\n  pagination: next\n", "sources/t.yaml:6: http.next is required with pagination next"},
		{"  url: http://x.test/a\n  pagination: cursor\n  cursor: body.next\n", "sources/t.yaml:6: http.cursor_param is required with pagination cursor"},
		{"  url: http://x.test/a\n  pagination: pages\n", `sources/t.yaml:6: http.pagination "pages" is not supported`},
		{"  url: http://x.test/a\n  since: updated_since\n  snapshot: true\n", "sources/t.yaml:6: http.since and http.snapshot are exclusive"},
		{"  url: ftp://x.test/a\n", `sources/t.yaml:5: http.url must start with http:// or https://`},
		{"  url: http://x.test/a\n  page_param: page\n  next: body.next\n", "sources/t.yaml:6: http.page_param is set but pagination is next"},
		{"  url: http://x.test/a\n  since: s\n  updated_at: item.[\n", "sources/t.yaml:7: http.updated_at expression"},
		{"  url: http://x.test/a\n  since: s\n  since_format: iso\n", `sources/t.yaml:7: http.since_format "iso" is not supported`},
	}
	for _, tc := range cases {
		src := "name: t\nconnector: http\ntimeout: 2s\nhttp:\n" + tc.block
		dir := conntest.WriteConfig(t, map[string]string{"sources/t.yaml": src})
		cfg, err := config.Load(dir)
		if err == nil {
			_, err = connectors.New(cfg.Sources[0], connectors.Env{Dir: dir})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config\n%s\nerror = %v\nwant it to contain %q", src, err, tc.want)
		}
	}
}

func TestLinkNext(t *testing.T) {
	t.Parallel()
	cases := []struct {
		values []string
		want   string
	}{
		{[]string{`<https://api.github.com/repositories/1/issues?page=2>; rel="next", <https://api.github.com/repositories/1/issues?page=5>; rel="last"`}, "https://api.github.com/repositories/1/issues?page=2"},
		{[]string{`<https://x.test/a?page=1>; rel="prev"`, `<https://x.test/a?ids=1,2&page=3>; rel="next"`}, "https://x.test/a?ids=1,2&page=3"},
		{[]string{`<https://x.test/a?p=2>; title="a, b"; rel="next last"`}, "https://x.test/a?p=2"},
		{[]string{`<https://x.test/a?p=2>; rel="last"`}, ""},
		{nil, ""},
	}
	for _, tc := range cases {
		if got := httpjson.LinkNext(tc.values); got != tc.want {
			t.Errorf("LinkNext(%q) = %q, want %q", tc.values, got, tc.want)
		}
	}
}

// When the budget runs out on the last page the run succeeds, and the next
// one is not due before the reset.
func TestRateLimitRemainingZeroOnLastPageDelaysNextRun(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "none", 2)
	api.headers.Set("X-RateLimit-Remaining", "0")
	api.headers.Set("X-RateLimit-Reset", fmt.Sprint(time.Now().Add(20*time.Minute).Unix()))
	r := conntest.Fetch(t, build(t, fmt.Sprintf("  url: %s\n  items: body.data\n", api.URL())), nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Result.MinInterval < 19*time.Minute || r.Result.MinInterval > 20*time.Minute {
		t.Errorf("MinInterval = %s, want about 20m (until X-RateLimit-Reset)", r.Result.MinInterval)
	}
}

// An updated-at far in the future (typically a millisecond epoch read as
// seconds) must not move the since cursor past every later change.
func TestFutureUpdatedAtDoesNotMoveTheCursor(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "none", 2)
	api.set(ticket{ID: 3, Title: "Bad clock", Status: "open", Updated: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)})
	r := conntest.Fetch(t, build(t, fmt.Sprintf("  url: %s\n  items: body.data\n  since: updated_since\n", api.URL())), nil)
	if r.Err != nil || len(r.IDs()) != 3 {
		t.Fatalf("err %v ids %v, want all items kept", r.Err, r.IDs())
	}
	if got, want := state(t, r.Result.Cursor).MaxUpdatedAt, api.ticket(2).Updated.Format(time.RFC3339Nano); got != want {
		t.Errorf("max_updated_at = %s, want %s (the future time ignored)", got, want)
	}
}

// Headers come from the source file with ${ENV} expanded at load time.
func TestHeadersFromEnv(t *testing.T) {
	t.Setenv("LOOKOUT_TEST_TICKETS_TOKEN", "tk_live_123")
	api := newFakeAPI(t, "none", 1)
	conn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n  headers:\n    Authorization: Bearer ${LOOKOUT_TEST_TICKETS_TOKEN}\n    X-Client: lookout\n", api.URL()))
	if r := conntest.Fetch(t, conn, nil); r.Err != nil {
		t.Fatal(r.Err)
	}
	h := api.log()[0].Header
	if h.Get("Authorization") != "Bearer tk_live_123" || h.Get("X-Client") != "lookout" || h.Get("Accept") != "application/json" {
		t.Errorf("request headers = %v", h)
	}
}
