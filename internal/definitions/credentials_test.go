package definitions

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/secrets"
)

func testRing(t *testing.T) *secrets.Ring {
	t.Helper()
	k, err := secrets.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	r, err := secrets.Parse(k)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Which values are credentials, sealed in place and bound to their place;
// what is shown; [redacted] sent back keeps the stored value.
func TestCredentialsSealOpenRedact(t *testing.T) {
	t.Parallel()
	keys := testRing(t)
	def := json.RawMessage(`{"name": "s", "connector": "http", "every": "1h",
		"http": {"url": "https://api.example.com", "headers": {"Authorization": "Bearer tok-1234", "X-Api-Key": "key-5678", "Accept": "application/json"}},
		"webhook": {"provider": "hmac", "secret": "hook-secret-9"},
		"github": {"token": "ghp_abcdef", "repo": "a/b"},
		"watches": [{"name": "w", "token": "not-the-source's"}]}`)
	sealed, err := sealCredentials(keys, "s", def)
	if err != nil {
		t.Fatal(err)
	}
	for _, plain := range []string{"tok-1234", "key-5678", "hook-secret-9", "ghp_abcdef"} {
		if strings.Contains(string(sealed), plain) {
			t.Errorf("%s is in clear: %s", plain, sealed)
		}
	}
	if !strings.Contains(string(sealed), `"Accept":"application/json"`) || !strings.Contains(string(sealed), `"not-the-source's"`) || !strings.Contains(string(sealed), `"repo":"a/b"`) {
		t.Errorf("a value that is no credential was sealed: %s", sealed)
	}
	if strings.Count(string(sealed), "${sealed:v1:k1:") != 4 {
		t.Errorf("want 4 sealed values: %s", sealed)
	}
	opened, plain, err := OpenCredentials(keys, "s", sealed)
	if err != nil || len(plain) != 4 || !strings.Contains(string(opened), `"Authorization":"Bearer tok-1234"`) {
		t.Fatalf("open: %v %v %s", err, plain, opened)
	}
	// Bound to the source's name and the value's place.
	if _, _, err := OpenCredentials(keys, "other", sealed); err == nil {
		t.Error("credentials of source s opened as source other's")
	}
	moved := strings.Replace(string(sealed), `"token":"${sealed`, `"password":"${sealed`, 1)
	if _, _, err := OpenCredentials(keys, "s", json.RawMessage(moved)); err == nil {
		t.Error("a ciphertext moved to another key opened")
	}
	if _, _, err := OpenCredentials(nil, "s", sealed); err == nil || !strings.Contains(err.Error(), "LOOKOUT_SECRET_KEY is not set") {
		t.Errorf("without keys: %v", err)
	}
	shown := string(RedactCredentials(sealed))
	if strings.Contains(shown, "${sealed") || strings.Count(shown, `"[redacted]"`) != 4 || !strings.Contains(shown, `"Accept":"application/json"`) {
		t.Errorf("shown: %s", shown)
	}
	// Sent back as shown, with a changed token: the others are kept.
	update := strings.Replace(shown, `"token":"[redacted]"`, `"token":"ghp_new"`, 1)
	kept, err := keepRedacted(json.RawMessage(update), sealed)
	if err != nil {
		t.Fatal(err)
	}
	resealed, err := sealCredentials(keys, "s", kept)
	if err != nil {
		t.Fatal(err)
	}
	opened, _, err = OpenCredentials(keys, "s", resealed)
	if err != nil || !strings.Contains(string(opened), `"token":"ghp_new"`) || !strings.Contains(string(opened), `"X-Api-Key":"key-5678"`) {
		t.Errorf("after the update: %v %s", err, opened)
	}
	// [redacted] where nothing is stored, or no key ring: refused, located.
	_, err = sealCredentials(keys, "s", json.RawMessage(`{"github": {"token": "[redacted]"}}`))
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Problems[0].Pointer != "/github/token" {
		t.Errorf("[redacted] with nothing stored: %v", err)
	}
	_, err = sealCredentials(nil, "s", json.RawMessage(`{"rss": {"headers": {"Cookie": "session=1"}}}`))
	if !errors.As(err, &ve) || ve.Problems[0].Pointer != "/rss/headers/Cookie" || !strings.Contains(ve.Problems[0].Message, "LOOKOUT_SECRET_KEY") {
		t.Errorf("no key ring: %v", err)
	}
}

// A postgres source's dsn holds the password: it is a credential, sealed
// at rest and redacted when shown, like a token.
func TestPostgresDSNIsACredential(t *testing.T) {
	t.Parallel()
	keys := testRing(t)
	def := json.RawMessage(`{"name": "s", "connector": "postgres", "every": "1h",
		"postgres": {"dsn": "postgres://reader:pw-4321@db.example.com/agents", "table": "agent_tasks", "key": "id", "cursor": "updated_at"}}`)
	sealed, err := sealCredentials(keys, "s", def)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), "pw-4321") || !strings.Contains(string(sealed), `"table":"agent_tasks"`) {
		t.Errorf("sealed: %s", sealed)
	}
	if shown := string(RedactCredentials(sealed)); !strings.Contains(shown, `"dsn":"[redacted]"`) {
		t.Errorf("shown: %s", shown)
	}
	opened, _, err := OpenCredentials(keys, "s", sealed)
	if err != nil || !strings.Contains(string(opened), `"dsn":"postgres://reader:pw-4321@db.example.com/agents"`) {
		t.Errorf("opened: %v %s", err, opened)
	}
}

// TestRedactCredentialsAllocatesLittle: RedactCredentials runs on every
// watch and source the API answers with or audits (each create: twice),
// so it must not build a replacer per key (it did: 35 MB of the 318 MB
// 2,000 creates allocated, docs/benchmarks.md (7)).
func TestRedactCredentialsAllocatesLittle(t *testing.T) {
	// Not parallel: testing.AllocsPerRun.
	def := json.RawMessage(`{"name": "w-000001", "when": "record.status == \"open\"", "notify": ["log"], "dedupe": {"key": "id", "window": "1h"}}`)
	want := `{"dedupe":{"key":"id","window":"1h"},"name":"w-000001","notify":["log"],"when":"record.status == \"open\""}`
	if got := string(RedactCredentials(def)); got != want {
		t.Fatalf("RedactCredentials = %s, want %s", got, want)
	}
	if allocs := testing.AllocsPerRun(100, func() { RedactCredentials(def) }); allocs > 60 {
		t.Errorf("RedactCredentials of a watch of 5 keys allocates %.0f times, want at most 60", allocs)
	}
}
