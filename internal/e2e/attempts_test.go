package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/testsignal"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// flakyReceiver is a webhook receiver that answers its first request 500,
// its second 503 with Retry-After: 1, and 200 from the third on.
type flakyReceiver struct {
	mu       sync.Mutex
	requests []hookRequest
	accepted chan hookRequest
}

type hookRequest struct {
	key, delivery string
	body          []byte
}

func (f *flakyReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	req := hookRequest{key: r.Header.Get(notify.HeaderIdempotencyKey), delivery: r.Header.Get("webhook-id"), body: b}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	n := len(f.requests)
	f.mu.Unlock()
	switch n {
	case 1:
		http.Error(w, "boom: the receiver's database is down", http.StatusInternalServerError)
	case 2:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy, come back in a second", http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusOK)
		f.accepted <- req
	}
}

func (f *flakyReceiver) seen() []hookRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]hookRequest(nil), f.requests...)
}

// attempt is one delivery attempt as a page shows it.
type attempt struct {
	n       int
	outcome string
	status  string
}

func (a attempt) String() string {
	return fmt.Sprintf("attempt %d %s HTTP %s", a.n, a.outcome, a.status)
}

// getPage GETs an HTML page of the api with a bearer token.
func getPage(t *testing.T, url, token string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", url, resp.StatusCode, b)
	}
	return string(b)
}

// attemptsOf reads the attempts a page lists, in the page's order.
func attemptsOf(t *testing.T, page string, re *regexp.Regexp) []attempt {
	t.Helper()
	var out []attempt
	for _, m := range re.FindAllStringSubmatch(page, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, attempt{n: n, outcome: m[2], status: m[3]})
	}
	return out
}

// End to end with the real binaries: alice's watch has a webhook of her
// own, whose receiver fails the first delivery (HTTP 500), asks for a
// second later (503, Retry-After: 1), then accepts it. Alice reads the
// notification's attempts on her page (/me/notifications/ID, with her
// token), the admin on the notification's admin page: three attempts in
// order, retry, retry, delivered, with the receiver's HTTP status each;
// the receiver got the same body, under the same idempotency key, three
// times and accepted it once.
func TestDeliveryAttemptsSeenByTheUserAndTheAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 200ms\nevaluator:\n  catch_up_interval: 1s\n"+
		"delivery:\n  poll_interval: 100ms\n  retry_min: 100ms\n  retry_max: 500ms\napi:\n  allow_private: true\n")
	up := &upstream{tickets: map[string]string{"1": "open"}}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	recv := &flakyReceiver{accepted: make(chan hookRequest, 4)}
	recvSrv := httptest.NewServer(recv)
	defer recvSrv.Close()

	alice := e.startSealedBinaries(t, "alice")
	code := alice.call(http.MethodPost, "/v1/watches", fmt.Sprintf(`{
		"new_source": {"name": "alice-tickets", "connector": "http", "every": "1h",
		               "http": {"url": %q},
		               "fields": {"id": "item.id", "title": "item.title", "status": "item.status"}},
		"watch": {"name": "done", "when": "record.status == \"done\"", "webhook": {"url": %q}}}`, upSrv.URL+"/tickets", recvSrv.URL+"/hook"), nil)
	if code != http.StatusCreated {
		t.Fatalf("create_watch: %d", code)
	}
	e.wait("the first run of alice's source", 1, `SELECT count(*) FROM records WHERE source = 'alice-tickets'`)
	up.set("1", "done")
	if code := alice.call(http.MethodPost, "/v1/sources/alice-tickets/run", "", nil); code != http.StatusAccepted {
		t.Fatalf("run_now: %d", code)
	}
	accepted := testsignal.Receive(t, recv.accepted, "the third delivery of alice's notification")
	e.wait("the notification, delivered", 1, `SELECT count(*) FROM notifications WHERE source = 'alice-tickets' AND status = 'delivered'`)

	reqs := recv.seen()
	if len(reqs) != 3 {
		t.Fatalf("the receiver got %d requests, want 3", len(reqs))
	}
	for i, r := range reqs {
		if r.key == "" || r.key != accepted.key || string(r.body) != string(accepted.body) {
			t.Errorf("request %d: key %q, body %s; the accepted one: key %q, body %s", i+1, r.key, r.body, accepted.key, accepted.body)
		}
	}

	var page struct {
		Items []struct {
			ID     int64
			Status string
		}
	}
	if code := alice.call(http.MethodGet, "/v1/notifications", "", &page); code != http.StatusOK || len(page.Items) != 1 {
		t.Fatalf("list_notifications: %d %+v", code, page)
	}
	id := page.Items[0].ID
	want := []attempt{{1, "retry", "500"}, {2, "retry", "503"}, {3, "delivered", "200"}}
	wantText := fmt.Sprint(want)

	// Alice's page: "Attempt N" with its outcome and "HTTP status".
	mine := regexp.MustCompile(`<strong>Attempt (\d+)</strong> <span class="status s-([a-z]+)">[a-z]+</span>(?: <span class="meta">HTTP (\d+)</span>)?`)
	body := getPage(t, alice.base+"/me/notifications/"+strconv.FormatInt(id, 10), alice.token)
	if got := attemptsOf(t, body, mine); fmt.Sprint(got) != wantText {
		t.Errorf("/me/notifications/%d lists %v, want %v\n%s", id, got, want, body)
	}
	if !strings.Contains(body, "boom: the receiver") || !strings.Contains(body, "busy, come back in a second") {
		t.Errorf("/me/notifications/%d does not show what the receiver answered:\n%s", id, body)
	}

	// The admin's page of the notification: its delivery history.
	_, adminToken, err := tokens.Create(context.Background(), e.pool, tokens.NewToken{Owner: "ops", Scope: tokens.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	admin := regexp.MustCompile(`<td>attempt (\d+)</td><td><span class="outcome o-([a-z]+)">[a-z]+</span></td><td class="num">[^<]*</td><td class="num">(\d*)</td>`)
	body = getPage(t, alice.base+"/admin/rows/notifications?id="+strconv.FormatInt(id, 10), adminToken)
	if got := attemptsOf(t, body, admin); fmt.Sprint(got) != wantText {
		t.Errorf("/admin/rows/notifications?id=%d lists %v, want %v\n%s", id, got, want, body)
	}
	// Nothing was sent again after the receiver accepted it.
	if n := len(recv.seen()); n != 3 {
		t.Errorf("the receiver got %d requests, want 3", n)
	}
}
