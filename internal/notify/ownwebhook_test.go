package notify

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// userReceiver is one API user's own webhook: it verifies each request
// with the Standard Webhooks library, as the user's receiver would, and
// counts the requests it is answering at once. With hang set it answers
// nothing until release is closed, like a receiver that hangs.
type userReceiver struct {
	t       *testing.T
	owner   string
	secret  string
	wh      *standardwebhooks.Webhook
	srv     *httptest.Server
	hang    bool
	release chan struct{}
	entered testsignal.Signal[string] // the dedupe key of each request, when it arrives
	done    testsignal.Signal[string] // the dedupe key of each 2xx answer

	mu       sync.Mutex
	inFlight int
	maxIn    int
	requests int
	accepted map[string]int
	problems []string
}

func newUserReceiver(t *testing.T, owner string, hang bool) *userReceiver {
	secret := SecretPrefix + base64.StdEncoding.EncodeToString([]byte("key of "+owner))
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	u := &userReceiver{t: t, owner: owner, secret: secret, wh: wh, hang: hang, release: make(chan struct{}), accepted: map[string]int{}}
	u.entered.Init(t)
	u.done.Init(t)
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	// Runs before the server closes (cleanups run last first): a hanging
	// handler must end for Close to return.
	t.Cleanup(u.unblock)
	return u
}

func (u *userReceiver) unblock() {
	select {
	case <-u.release:
	default:
		close(u.release)
	}
}

func (u *userReceiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = u.wh.Verify(body, r.Header)
	}
	var p Payload
	if err == nil {
		err = json.Unmarshal(body, &p)
	}
	u.mu.Lock()
	if err == nil && p.Owner != u.owner {
		err = fmt.Errorf("payload of owner %q at %s's webhook", p.Owner, u.owner)
	}
	if err != nil {
		u.problems = append(u.problems, err.Error())
		u.mu.Unlock()
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	u.requests++
	u.inFlight++
	u.maxIn = max(u.maxIn, u.inFlight)
	u.mu.Unlock()
	u.entered.Signal(p.DedupeKey)
	if u.hang {
		<-u.release
	}
	u.mu.Lock()
	u.inFlight--
	u.accepted[p.DedupeKey]++
	u.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	u.done.Signal(p.DedupeKey)
}

// stats returns the most requests answered at once, the requests seen and
// the keys accepted more than once; it fails the test on any request the
// receiver refused.
func (u *userReceiver) stats() (maxIn, requests int, dups []string) {
	u.t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, p := range u.problems {
		u.t.Errorf("%s's receiver: %s", u.owner, p)
	}
	for k, n := range u.accepted {
		if n > 1 {
			dups = append(dups, k)
		}
	}
	return u.maxIn, u.requests, dups
}

// ownWebhookLane returns a deliverer with the own-webhook lane as the
// evaluator runs it (OwnWebhookSinkConfig), each watch's webhook being
// its owner's receiver.
func ownWebhookLane(t *testing.T, pool *pgxpool.Pool, receivers ...*userReceiver) *Deliverer {
	t.Helper()
	byWatch := map[string]*userReceiver{}
	for _, u := range receivers {
		byWatch["watch-of-"+u.owner] = u
	}
	lane := OwnWebhookSinkConfig()
	// Long enough that no attempt times out while the test holds a
	// receiver, on however slow a machine: the test is about sharing.
	lane.Timeout = time.Minute
	sink := NewOwnWebhookSink(OwnWebhookOptions{Concurrency: lane.Concurrency,
		Target: func(_ context.Context, source, watch string) (OwnWebhookTarget, error) {
			u := byWatch[watch]
			if u == nil {
				return OwnWebhookTarget{}, &PermanentError{Err: fmt.Errorf("watch %s of source %s no longer exists", watch, source)}
			}
			return OwnWebhookTarget{URL: u.srv.URL + "/hook", Secret: u.secret}, nil
		}})
	t.Cleanup(sink.client.CloseIdleConnections)
	return newDeliverer(t, pool, map[string]Sink{config.OwnWebhookSink: sink},
		// No poll: what wakes the lane is a NOTIFY or outcomes recorded.
		map[string]*config.Sink{config.OwnWebhookSink: lane}, DelivererConfig{Lease: 5 * time.Minute, PollInterval: time.Hour})
}

// enqueueOwn enqueues n notifications of owner's watch for its own
// webhook, as the evaluator does, and returns their dedupe keys.
func enqueueOwn(t *testing.T, pool *pgxpool.Pool, owner, prefix string, n int) []string {
	t.Helper()
	ctx := context.Background()
	notes := make([]outbox.Notification, n)
	keys := make([]string, n)
	for i := range notes {
		keys[i] = fmt.Sprintf("%s/%s/r%d", owner, prefix, i)
		p := Payload{DedupeKey: keys[i], Kind: KindSingle, Watch: "watch-of-" + owner, Source: "src", Owner: owner,
			Title: "Record", Record: PayloadRecord{ID: fmt.Sprintf("r%d", i)}, Change: PayloadChange{ChangedFields: []string{}},
			Urgency: "medium", Reason: "test", CreatedAt: time.Now().UTC()}
		notes[i] = outbox.Notification{DedupeKey: keys[i], Sink: config.OwnWebhookSink, Source: "src", RecordID: p.Record.ID,
			Watch: p.Watch, Owner: owner, Title: p.Title, Urgency: p.Urgency, Reason: p.Reason, Payload: p.Marshal()}
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := outbox.Enqueue(ctx, tx, notes); err != nil {
			return err
		}
		return outbox.Wake(ctx, tx)
	})
	if err != nil {
		t.Fatalf("enqueue %s's notifications: %v", owner, err)
	}
	return keys
}

// One user's receiver hangs with a backlog queued before everyone else's:
// another user's notifications are still delivered, and the hanging user
// never has more than OwnWebhookPerOwner attempts in flight.
func TestOwnWebhookLaneIsFairAcrossOwners(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	alice := newUserReceiver(t, "alice", true)
	bob := newUserReceiver(t, "bob", false)
	d := ownWebhookLane(t, pool, alice, bob)
	aliceKeys := enqueueOwn(t, pool, "alice", "backlog", 20) // older than bob's: first come
	bobKeys := enqueueOwn(t, pool, "bob", "first", 1)

	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	defer alice.unblock() // before Stop, which waits for the attempts in flight
	// alice's receiver holds the attempts it was given; bob's
	// notification goes through meanwhile, and so does one he gets later
	// (the lane claims again while alice's attempts still hang).
	for range OwnWebhookPerOwner {
		alice.entered.WaitOrTimeout()
	}
	if got := bob.done.WaitOrTimeout(); got != bobKeys[0] {
		t.Fatalf("bob's receiver accepted %s; want %s", got, bobKeys[0])
	}
	later := enqueueOwn(t, pool, "bob", "later", 1)
	if got := bob.done.WaitOrTimeout(); got != later[0] {
		t.Fatalf("bob's receiver accepted %s; want %s", got, later[0])
	}
	maxIn, requests, _ := alice.stats()
	if maxIn > OwnWebhookPerOwner || requests != OwnWebhookPerOwner {
		t.Errorf("while alice's receiver hung: %d of her requests at once, %d in all; want %d and %d",
			maxIn, requests, OwnWebhookPerOwner, OwnWebhookPerOwner)
	}
	var leased int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM notifications WHERE owner = 'alice' AND lease_owner IS NOT NULL`).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != OwnWebhookPerOwner {
		t.Errorf("alice has %d notifications leased while her receiver hangs; want %d", leased, OwnWebhookPerOwner)
	}

	// Her receiver answers again: her backlog drains, still within her share.
	alice.unblock()
	testsignal.Eventually(t, "every notification delivered", func() bool {
		return countStatus(t, pool, config.OwnWebhookSink, "delivered") == len(aliceKeys)+2
	})
	maxIn, requests, dups := alice.stats()
	if maxIn > OwnWebhookPerOwner || requests != len(aliceKeys) || len(dups) > 0 {
		t.Errorf("alice's receiver: %d requests at once, %d in all, repeated %v; want at most %d, %d, none",
			maxIn, requests, dups, OwnWebhookPerOwner, len(aliceKeys))
	}
	if _, _, dups := bob.stats(); len(dups) > 0 {
		t.Errorf("bob's receiver saw repeats: %v", dups)
	}
}

// DeliverDue (evaluator once) drains the fair lane: a claim that finds
// every due owner at its share waits for outcomes and claims again, so
// one call delivers a backlog larger than the share.
func TestOwnWebhookLaneDrainsBacklogsBeyondTheShare(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	alice := newUserReceiver(t, "alice", false)
	bob := newUserReceiver(t, "bob", false)
	d := ownWebhookLane(t, pool, alice, bob)
	aliceKeys := enqueueOwn(t, pool, "alice", "backlog", 7)
	enqueueOwn(t, pool, "bob", "first", 1)

	n, err := d.DeliverDue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != len(aliceKeys)+1 || countStatus(t, pool, config.OwnWebhookSink, "delivered") != n {
		t.Errorf("DeliverDue attempted %d, delivered %d; want %d and all",
			n, countStatus(t, pool, config.OwnWebhookSink, "delivered"), len(aliceKeys)+1)
	}
	if maxIn, requests, dups := alice.stats(); maxIn > OwnWebhookPerOwner || requests != len(aliceKeys) || len(dups) > 0 {
		t.Errorf("alice's receiver: %d requests at once, %d in all, repeated %v; want at most %d, %d, none",
			maxIn, requests, dups, OwnWebhookPerOwner, len(aliceKeys))
	}
	if n, err := d.DeliverDue(context.Background()); n != 0 || err != nil {
		t.Errorf("second DeliverDue = %d, %v; want 0, nil", n, err)
	}
}
