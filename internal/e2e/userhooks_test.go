package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/secrets"
	"github.com/lookout-dev/lookout/internal/testsignal"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// privateTickets is an HTTP JSON API that wants a bearer token.
type privateTickets struct {
	mu     sync.Mutex
	token  string
	status map[string]string
	auths  map[string]int
}

func (u *privateTickets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	auth := r.Header.Get("Authorization")
	u.auths[auth]++
	if auth != "Bearer "+u.token {
		http.Error(w, `{"message": "Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	var items []map[string]string
	for id, st := range u.status {
		items = append(items, map[string]string{"id": id, "title": "ticket " + id, "status": st})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(items)
}

// End to end with the real binaries and LOOKOUT_SECRET_KEY: alice creates
// a source with her upstream token and a watch with her own webhook over
// HTTP; the api answers the webhook's secret once; the syncer fetches
// with her token (opened from the sealed definition), the evaluator's
// deliverer POSTs her notification to her URL signed with that secret;
// no daemon logs the token or the secret.
func TestAPIOwnWebhookAndSealedCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 200ms\nevaluator:\n  catch_up_interval: 1s\ndelivery:\n  poll_interval: 200ms\napi:\n  allow_private: true\n")
	up := &privateTickets{token: "ghp_e2eUpstreamToken0123456789", status: map[string]string{"1": "open"}, auths: map[string]int{}}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	type hookReq struct {
		header http.Header
		body   []byte
	}
	got := make(chan hookReq, 8)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- hookReq{r.Header.Clone(), b}
		w.WriteHeader(http.StatusOK)
	}))
	defer receiver.Close()

	alice := e.startSealedBinaries(t, "alice")

	var created struct {
		Watch struct {
			Owner         string
			Definition    json.RawMessage
			WebhookSecret string `json:"webhook_secret"`
		}
		Source *struct{ Definition json.RawMessage }
	}
	code := alice.call(http.MethodPost, "/v1/watches", fmt.Sprintf(`{
		"new_source": {"name": "alice-tickets", "connector": "http", "every": "1h",
		               "http": {"url": %q, "headers": {"Authorization": "Bearer %s"}},
		               "fields": {"id": "item.id", "title": "item.title", "status": "item.status"}},
		"watch": {"name": "done", "when": "record.status == \"done\"", "webhook": {"url": %q}}}`, upSrv.URL+"/tickets", up.token, receiver.URL+"/hook"), &created)
	secret := created.Watch.WebhookSecret
	if code != http.StatusCreated || !strings.HasPrefix(secret, "whsec_") || created.Source == nil ||
		strings.Contains(string(created.Source.Definition), up.token) || !strings.Contains(string(created.Source.Definition), "[redacted]") {
		t.Fatalf("create_watch: %d %+v", code, created)
	}
	e.wait("the first run of alice's source", 1, `SELECT count(*) FROM records WHERE source = 'alice-tickets'`)

	up.mu.Lock()
	up.status["1"] = "done"
	up.mu.Unlock()
	if code := alice.call(http.MethodPost, "/v1/sources/alice-tickets/run", "", nil); code != http.StatusAccepted {
		t.Fatalf("run_now: %d", code)
	}
	req := testsignal.Receive(t, got, "alice's webhook request")
	if err := notify.VerifyWebhook(secret, req.header, req.body, 0); err != nil {
		t.Fatalf("the signature does not verify with the secret the API returned: %v", err)
	}
	var p notify.Payload
	if err := json.Unmarshal(req.body, &p); err != nil || p.Owner != "alice" || p.Watch != "done" || p.Record.ID != "1" {
		t.Errorf("payload %s (%v)", req.body, err)
	}
	up.mu.Lock()
	withToken, without := up.auths["Bearer "+up.token], up.auths[""]
	up.mu.Unlock()
	if withToken < 2 || without != 0 {
		t.Errorf("the upstream saw %d requests with alice's token and %d without", withToken, without)
	}
	var page struct {
		Items []struct {
			Definition json.RawMessage
		}
	}
	if code := alice.call(http.MethodGet, "/v1/watches", "", &page); code != 200 || len(page.Items) != 1 || strings.Contains(string(page.Items[0].Definition), secret) {
		t.Errorf("list_watches: %d %+v", code, page)
	}
	if n := e.count(`SELECT count(*) FROM source_definitions WHERE definition::text LIKE '%' || $1 || '%'`, up.token); n != 0 {
		t.Errorf("the token is stored in clear")
	}
	for _, d := range e.daemons {
		if d.Count(up.token) > 0 || d.Count(strings.TrimPrefix(secret, "whsec_")) > 0 {
			t.Errorf("a daemon logged a secret:\n%s", d.Logs())
		}
	}
}

// startSealedBinaries starts the syncer, the evaluator and the api as
// binaries sharing one LOOKOUT_SECRET_KEY (users' credentials sealed at
// rest) and returns a client of the api with a token of owner.
func (e *env) startSealedBinaries(t *testing.T, owner string) *client {
	t.Helper()
	key, err := secrets.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	keyEnv := secrets.KeyEnv + "=" + key
	build := func(name string) string { return clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/"+name) }
	syncerd := clitest.StartBinaryEnv(t, build("syncer"), e.dir, e.url, keyEnv)
	evaluatord := clitest.StartBinaryEnv(t, build("evaluator"), e.dir, e.url, keyEnv)
	apid := clitest.StartBinaryEnv(t, build("api"), e.dir, e.url, keyEnv)
	e.daemons = []*clitest.DaemonTest{syncerd, evaluatord, apid}
	_, tok, err := tokens.Create(context.Background(), e.pool, tokens.NewToken{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, base: "http://" + apid.Addr, token: tok}
}
