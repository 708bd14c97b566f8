package doctest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/connectors/github/githubtest"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// fixture is the world the shell, SQL and MCP examples run in: a fresh
// schema, the api daemon, and a configuration directory holding every
// object the docs name.
type fixture struct {
	t      *testing.T
	bins   binaries
	work   string // the shell blocks' working directory: config/ and data/
	config string // work/config: examples/config plus the docs' sources
	url    string // DATABASE_URL
	// readmeURL is the database of README.md's quick start, a schema of
	// its own: `make run` runs it on its own throwaway PostgreSQL, and its
	// directory (examples/config) is not the fixture's, which the
	// applied generation would refuse (docs/config.md).
	readmeURL string
	pool      *pgxpool.Pool
	token     string // alice's, from `api token create --owner alice`
	api       *clitest.DaemonTest
	env       []string
	// subst are the documented placeholders the test replaces in shell
	// blocks, in order; and curl fails on an HTTP error.
	subst [][2]string
	mu    sync.Mutex
	// delivered are the bodies the ops-hook sink's receiver got.
	delivered [][]byte
	// releases is the fake API of the source releases: drafts until
	// release() publishes them.
	releases *releasesAPI
}

// releasesAPI serves {"items": [...]} of two releases, drafts until
// released.
type releasesAPI struct {
	mu       sync.Mutex
	released bool
}

func (r *releasesAPI) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/releases.atom" {
		w.Header().Set("Content-Type", "application/atom+xml")
		_, _ = io.WriteString(w, releasesAtom)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	status := "draft"
	if r.released {
		status = "released"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"items": []map[string]any{
		{"id": 1, "title": "v1.0", "status": status, "stars": 10},
		{"id": 2, "title": "v2.0", "status": status, "stars": 20},
	}})
}

// releasesAtom stands for https://github.com/lookout-dev/lookout/releases.atom.
const releasesAtom = `<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><id>tag:github.com,2008:lookout/releases</id><title>Release notes</title>
<updated>2026-11-30T10:00:00Z</updated>
<entry><id>tag:github.com,2008:Repository/1/v1.0</id><title>v1.0</title><updated>2026-11-30T10:00:00Z</updated>
<link rel="alternate" href="https://github.com/lookout-dev/lookout/releases/tag/v1.0"/></entry></feed>
`

const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// newFixture copies examples/config and examples/data, adds the sources the
// docs name — github-lookout and github-issues (the GitHub fake), releases
// (a local JSON API) — and the sinks (log, ops-hook: a local receiver),
// starts the api binary on a fresh schema and makes alice's token.
func newFixture(t *testing.T, bins binaries) *fixture {
	t.Helper()
	_, url := pgtest.Schema(t)
	_, readmeURL := pgtest.Schema(t)
	fx := &fixture{t: t, bins: bins, work: t.TempDir(), url: url, readmeURL: readmeURL, releases: &releasesAPI{}}
	fx.config = filepath.Join(fx.work, "config")
	fx.pool = pgtest.PoolFor(t, url)
	// work/examples is a pristine copy, for README.md's quick start;
	// work/config and work/data get the docs' objects.
	for _, c := range [][]string{{"examples/config", "config"}, {"examples/data", "data"}, {"examples", "examples"}} {
		if out, err := exec.Command("cp", "-R", filepath.Join(root, c[0]), filepath.Join(fx.work, c[1])).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v\n%s", c[0], err, out)
		}
	}
	gh := githubtest.New(t)
	gh.Seed(5)
	is := gh.Get(4)
	is.Labels = []string{"bug", "p1"}
	gh.Put(is)
	rel := httptest.NewServer(fx.releases)
	t.Cleanup(rel.Close)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fx.mu.Lock()
		fx.delivered = append(fx.delivered, body)
		fx.mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	// A booking page for the preview examples (docs/web.md, api.md, mcp.md).
	booking := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slots" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<!doctype html><html><head><title>Slots</title></head><body><table class="slots">
<tr class="slot" data-slot-id="s-0900"><td class="when">Mon 09:00</td><td class="places">0 places</td><td>Full</td></tr>
<tr class="slot" data-slot-id="s-1100"><td class="when">Mon 11:00</td><td class="places">3 places</td><td><a class="book" href="/book/s-1100">Book</a></td></tr>
</table></body></html>`)
	}))
	t.Cleanup(booking.Close)

	fx.write("config/lookout.yaml", fmt.Sprintf(`# examples/config/lookout.yaml, and the sinks the docs name
sinks:
  log:
    type: log
  ops-hook:
    type: webhook
    url: %s/lookout
    secret: ${LOOKOUT_WEBHOOK_SECRET}
defaults:
  every: 1h
  jitter: 0s
  notify: [log]
api:
  allow_private: true
`, hook.URL))
	fx.write("config/sources/github-lookout.yaml", fmt.Sprintf(`name: github-lookout
connector: github
github:
  repo: %s
  token: ${GITHUB_TOKEN}
  base_url: %s
  state: all
`, gh.Repo, gh.Srv.URL))
	fx.write("config/sources/github-issues.yaml", fmt.Sprintf(`name: github-issues
connector: github
github:
  repo: %s
  token: ${GITHUB_TOKEN}
  base_url: %s
watches:
  - name: needs-me
    when: record.status == "open" && "p1" in record.labels
    notify: [ops-hook]
`, gh.Repo, gh.Srv.URL))
	fx.write("config/sources/releases.yaml", fmt.Sprintf(`name: releases
connector: http
http:
  url: %s/releases
  items: body.items
fields:
  id: string(item.id)
  title: item.title
  status: item.status
  extra:
    stars: item.stars
`, rel.URL))

	fx.env = os.Environ()
	key := strings.TrimSpace(fx.cmd(bins.api, "secret-key"))
	extra := []string{"LOOKOUT_CONFIG=" + fx.config, "LOOKOUT_SECRET_KEY=" + key,
		"GITHUB_TOKEN=" + gh.Token, "LOOKOUT_WEBHOOK_SECRET=" + webhookSecret, "LOOKOUT_LOG_FORMAT="}
	fx.api = clitest.StartBinaryEnv(t, bins.api, fx.config, url, extra...)
	fx.env = append(append(os.Environ(), "PATH="+bins.dir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"DATABASE_URL="+url, "LOOKOUT_LISTEN="), extra...)
	out := fx.cmd(bins.api, "token", "create", "--owner", "alice")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	fx.token = lines[len(lines)-1]
	fx.env = append(fx.env, "TOKEN="+fx.token, "LOOKOUT_TOKEN="+fx.token)
	fx.subst = [][2]string{
		{"postgres://lookout@db.internal:5432/lookout", url},
		{"127.0.0.1:9466", fx.api.Addr},
		{"/etc/lookout", fx.config},
		{"examples/config", filepath.Join(fx.work, "examples", "config")},
		{"lk_...", fx.token},
		{"https://github.com/lookout-dev/lookout/releases.atom", rel.URL + "/releases.atom"},
		{"https://hooks.example.com/lookout", hook.URL + "/lookout"},
		{"https://booking.example.net", booking.URL},
		{"curl -s ", "curl --fail-with-body -sS "},
	}
	return fx
}

func (fx *fixture) write(name, content string) {
	fx.t.Helper()
	if err := os.WriteFile(filepath.Join(fx.work, name), []byte(content), 0o644); err != nil {
		fx.t.Fatal(err)
	}
}

// cmd runs a binary in the fixture's environment and returns its stdout.
func (fx *fixture) cmd(bin string, args ...string) string {
	fx.t.Helper()
	c := exec.Command(bin, append([]string{"--config", fx.config}, args...)...)
	c.Env = fx.env
	c.Dir = fx.work
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		fx.t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// release mirrors the fixture's sources once, gives alice a watch shipped
// on releases (through the API), publishes both releases and has it mirrored and
// evaluated: the releases source gets an updated change alice's watch
// notifies.
func (fx *fixture) release() {
	fx.t.Helper()
	fx.cmd(fx.bins.syncer, "once")
	req, err := http.NewRequest(http.MethodPost, "http://"+fx.api.Addr+"/v1/watches", strings.NewReader(
		`{"source": "releases", "watch": {"name": "shipped", "when": "change.kind == \"updated\" && record.status == \"released\"", "notify": ["log"]}}`))
	if err != nil {
		fx.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+fx.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fx.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		fx.t.Fatalf("alice's watch shipped: %s\n%s", resp.Status, body)
	}
	fx.releases.mu.Lock()
	fx.releases.released = true
	fx.releases.mu.Unlock()
	fx.cmd(fx.bins.syncer, "run-now", "releases")
	fx.cmd(fx.bins.syncer, "once")
	fx.cmd(fx.bins.evaluator, "once")
}
