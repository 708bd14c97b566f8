package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/notify/url/urltest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// End to end with the real binaries: alice creates a watch with her own
// channel (an ntfy URL with her password, on a fake ntfy server) over
// HTTP; the api stores the URL sealed and shows it redacted; when her
// record matches, the evaluator's deliverer publishes exactly one message
// to her ntfy topic through the lane of users' channels; no daemon logs
// her password and the database holds it only sealed.
func TestAPIOwnChannelDeliversOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 200ms\nevaluator:\n  catch_up_interval: 1s\ndelivery:\n  poll_interval: 200ms\napi:\n  allow_private: true\n")
	ntfy := urltest.New(t, "ntfy")
	up := &privateTickets{token: "ghp_e2eChannelUpstream0123456789", status: map[string]string{"1": "open"}, auths: map[string]int{}}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()

	alice := e.startSealedBinaries(t, "alice")

	var created struct {
		Watch struct {
			Owner      string
			Definition json.RawMessage
		}
	}
	code := alice.call(http.MethodPost, "/v1/watches", fmt.Sprintf(`{
		"new_source": {"name": "alice-tickets", "connector": "http", "every": "1h",
		               "http": {"url": %q, "headers": {"Authorization": "Bearer %s"}},
		               "fields": {"id": "item.id", "title": "item.title", "status": "item.status"}},
		"watch": {"name": "done", "when": "record.status == \"done\"", "channel": {"url": %q}}}`,
		upSrv.URL+"/tickets", up.token, ntfy.NotificationURL()), &created)
	def := string(created.Watch.Definition)
	if code != http.StatusCreated || strings.Contains(def, urltest.NtfyPassword) || !strings.Contains(def, "ntfy://") || !strings.Contains(def, "[redacted]") {
		t.Fatalf("create_watch: %d %s", code, def)
	}
	e.wait("the first run of alice's source", 1, `SELECT count(*) FROM records WHERE source = 'alice-tickets'`)

	up.mu.Lock()
	up.status["1"] = "done"
	up.mu.Unlock()
	if code := alice.call(http.MethodPost, "/v1/sources/alice-tickets/run", "", nil); code != http.StatusAccepted {
		t.Fatalf("run_now: %d", code)
	}
	e.wait("alice's notification delivered", 1, `SELECT count(*) FROM notifications WHERE sink = '@channel' AND status = 'delivered'`)
	testsignal.Eventually(t, "the message at the fake ntfy", func() bool { return ntfy.Total() >= 1 })
	if n, titles := ntfy.Total(), ntfy.Titles(); n != 1 || len(titles) != 1 || !strings.Contains(titles[0], "ticket 1") {
		t.Errorf("ntfy accepted %d messages %q, want one about ticket 1", n, titles)
	}
	if p := ntfy.Problems(); len(p) > 0 {
		t.Errorf("requests ntfy refuses: %q", p)
	}
	if n := e.count(`SELECT count(*) FROM watches WHERE definition::text LIKE '%' || $1 || '%'`, urltest.NtfyPassword); n != 0 {
		t.Errorf("the channel's password is stored in clear")
	}
	for _, d := range e.daemons {
		if d.Count(urltest.NtfyPassword) > 0 {
			t.Errorf("a daemon logged the channel's password:\n%s", d.Logs())
		}
	}
}
