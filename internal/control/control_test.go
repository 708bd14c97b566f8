package control

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/idempotency"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/secrets"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

func newService(t *testing.T, keys *secrets.Ring) *Service {
	t.Helper()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE things (owner text, name text UNIQUE)`); err != nil {
		t.Fatal(err)
	}
	return New(pool, nil, nil, Config{Keys: keys}, slog.New(slog.DiscardHandler))
}

func count(t *testing.T, s *Service) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM things`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// createThing is a create as the API runs it: a row and its answer.
func createThing(name string, secret bool) func(ctx context.Context, tx pgx.Tx) (*Answer, error) {
	return func(ctx context.Context, tx pgx.Tx) (*Answer, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO things VALUES ('alice', $1)`, name); err != nil {
			return nil, err
		}
		if name == "bad" {
			return nil, Invalid("/name", "bad is not a good name")
		}
		body, _ := json.Marshal(map[string]any{"name": name, "secret": "whsec_x"})
		return &Answer{Status: 201, Body: body, Secret: secret}, nil
	}
}

func TestIdempotentCreates(t *testing.T) {
	k, _ := secrets.NewKey("k1")
	keys, _ := secrets.Parse(k)
	s := newService(t, keys)
	ctx := context.Background()
	alice := Principal{Owner: "alice"}

	first, err := s.Idempotent(ctx, alice, "key-1", "create_thing", []byte(`{"name":"a"}`), createThing("a", true))
	if err != nil || first.Replayed || first.Status != 201 {
		t.Fatalf("first: %+v %v", first, err)
	}
	// The stored answer is sealed: no secret in clear in the table.
	var stored []byte
	if err := s.pool.QueryRow(ctx, `SELECT response FROM idempotency_keys`).Scan(&stored); err != nil || strings.Contains(string(stored), "whsec_") {
		t.Errorf("stored answer %q %v", stored, err)
	}
	again, err := s.Idempotent(ctx, alice, "key-1", "create_thing", []byte(`{"name":"a"}`), createThing("a2", true))
	if err != nil || !again.Replayed || string(again.Body) != string(first.Body) || count(t, s) != 1 {
		t.Fatalf("retry: %+v %v, %d rows", again, err, count(t, s))
	}
	_, err = s.Idempotent(ctx, alice, "key-1", "create_thing", []byte(`{"name":"b"}`), createThing("b", false))
	var mm *idempotency.MismatchError
	if !errors.As(err, &mm) || !strings.Contains(err.Error(), "different request body") || count(t, s) != 1 {
		t.Errorf("other body, same key: %v", err)
	}
	// Keys are per owner: Bob's key-1 is his own.
	if a, err := s.Idempotent(ctx, Principal{Owner: "bob"}, "key-1", "create_thing", []byte(`{"name":"c"}`), createThing("c", false)); err != nil || a.Replayed {
		t.Errorf("bob's key-1: %+v %v", a, err)
	}
	// A failed create leaves nothing, and the key free.
	if _, err := s.Idempotent(ctx, alice, "key-2", "create_thing", []byte(`{"name":"bad"}`), createThing("bad", false)); err == nil {
		t.Fatal("bad create succeeded")
	}
	if a, err := s.Idempotent(ctx, alice, "key-2", "create_thing", []byte(`{"name":"bad"}`), createThing("d", false)); err != nil || a.Replayed {
		t.Errorf("key-2 after a failure: %+v %v", a, err)
	}
	if n := count(t, s); n != 3 {
		t.Errorf("%d rows, want 3 (a, c, d)", n)
	}
}

// Concurrent requests with one key: one create, the others get its answer.
func TestIdempotentConcurrent(t *testing.T) {
	s := newService(t, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	answers := make([]*Answer, 8)
	errs := make([]error, 8)
	for i := range answers {
		wg.Go(func() {
			answers[i], errs[i] = s.Idempotent(ctx, Principal{Owner: "alice"}, "same", "create_thing", []byte(`{}`), createThing("x", false))
		})
	}
	wg.Wait()
	replayed := 0
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if a.Replayed {
			replayed++
		}
	}
	if replayed != 7 || count(t, s) != 1 {
		t.Errorf("%d replayed, %d rows; want 7 and 1", replayed, count(t, s))
	}
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestCheckURL(t *testing.T) {
	r := fakeResolver{
		"api.example.com": {netip.MustParseAddr("93.184.216.34")},
		"db.internal":     {netip.MustParseAddr("10.0.0.5")},
		"rebind.example":  {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("169.254.169.254")},
	}
	for _, tc := range []struct {
		url          string
		allowPrivate bool
		want         string
	}{
		{"https://api.example.com/items", false, ""},
		{"ftp://api.example.com/", false, "absolute http or https URL"},
		{"/relative", false, "absolute http or https URL"},
		{"https://user:pw@api.example.com/", false, "must not carry credentials"},
		{"http://127.0.0.1:5432/", false, "127.0.0.1, a loopback address; lookout does not fetch"},
		{"http://localhost/", false, "loopback"},
		{"http://db.internal/", false, "10.0.0.5, a private address; lookout does not fetch such addresses for API users (the operator may allow it with api.allow_private)"},
		{"http://db.internal/", true, ""},
		{"http://169.254.169.254/latest/meta-data/", true, "a cloud metadata address; lookout does not fetch such addresses for API users (never, whatever api.allow_private says)"},
		{"https://rebind.example/", true, "169.254.169.254, a cloud metadata address"},
		{"https://nope.example/", false, `host "nope.example" does not resolve`},
	} {
		err := CheckURL(context.Background(), r, tc.url, "/http/url", tc.allowPrivate)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.url, err, tc.want)
		case err != nil:
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Errors[0].Pointer != "/http/url" {
				t.Errorf("%s: not located: %#v", tc.url, err)
			}
		}
	}
}

func TestWebhookSecret(t *testing.T) {
	if _, _, err := NewWebhookSecret(nil, "webhook:alice/x"); err == nil || !strings.Contains(err.Error(), "LOOKOUT_SECRET_KEY") {
		t.Errorf("without keys: %v", err)
	}
	k, _ := secrets.NewKey("k1")
	keys, _ := secrets.Parse(k)
	secret, sealed, err := NewWebhookSecret(keys, definitions.WebhookContext("alice-src", "x"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") || strings.Contains(sealed, secret) || !definitions.IsSealed(sealed) {
		t.Fatalf("%q %q %v", secret, sealed, err)
	}
	if plain, err := definitions.OpenWebhookSecret(keys, "alice-src", "x", sealed); err != nil || plain != secret {
		t.Errorf("open: %q %v", plain, err)
	}
	if _, err := definitions.OpenWebhookSecret(keys, "alice-src", "y", sealed); err == nil {
		t.Error("a secret sealed for watch x opened for watch y")
	}
}

// A request that waits on a key held by a create that then fails takes
// the key itself once the first rolls back, and creates.
func TestIdempotentWaiterTakesTheKeyOfAFailedCreate(t *testing.T) {
	s := newService(t, nil)
	ctx := context.Background()
	alice := Principal{Owner: "alice"}
	holding, fail := make(chan struct{}), make(chan struct{})
	firstErr := make(chan error, 1)
	go func() {
		_, err := s.Idempotent(ctx, alice, "k", "create_thing", []byte(`{}`), func(ctx context.Context, tx pgx.Tx) (*Answer, error) {
			close(holding)
			<-fail
			return nil, Invalid("/name", "refused")
		})
		firstErr <- err
	}()
	<-holding
	second := make(chan *Answer, 1)
	go func() {
		a, err := s.Idempotent(ctx, alice, "k", "create_thing", []byte(`{}`), createThing("x", false))
		if err != nil {
			t.Errorf("second: %v", err)
		}
		second <- a
	}()
	// The second waits on the key's lock while the first holds it.
	testsignal.Eventually(t, "the second request waits on the key", func() bool {
		var n int
		err := s.pool.QueryRow(ctx, `
			SELECT count(*) FROM pg_locks, (SELECT hashtextextended('lookout.idempotency:alice:k', 0) AS h) k
			WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			  AND classid::bigint = (h >> 32) & 4294967295 AND objid::bigint = h & 4294967295`).Scan(&n)
		return err == nil && n > 0
	})
	close(fail)
	if err := <-firstErr; err == nil {
		t.Fatal("the first create succeeded")
	}
	if a := <-second; a == nil || a.Replayed || count(t, s) != 1 {
		t.Errorf("second: %+v, %d rows; want a create of its own", a, count(t, s))
	}
}
