package web_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
)

// site serves pages the way a web server does: a strong ETag and 304 for
// a matching If-None-Match, a robots.txt (404 when unset), and hooks for
// the failures real sites answer with.
type site struct {
	srv *httptest.Server

	mu        sync.Mutex
	pages     map[string]sitePage
	robots    string
	robotsErr int // a status robots.txt answers with instead
	log       []string
	intercept func(w http.ResponseWriter, r *http.Request) bool
}

type sitePage struct {
	body  []byte
	ctype string
}

func newSite(t *testing.T) *site {
	t.Helper()
	s := &site{pages: map[string]sitePage{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// set serves body at path.
func (s *site) set(path string, body []byte, ctype string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pages[path] = sitePage{body: body, ctype: ctype}
}

// requests returns "path" or "path (conditional)" for each request.
func (s *site) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

func (s *site) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	entry := r.URL.Path
	if r.Header.Get("If-None-Match") != "" {
		entry += " (conditional)"
	}
	s.log = append(s.log, entry)
	p, ok := s.pages[r.URL.Path]
	robots, robotsErr, intercept := s.robots, s.robotsErr, s.intercept
	s.mu.Unlock()
	if intercept != nil && intercept(w, r) {
		return
	}
	if r.URL.Path == "/robots.txt" {
		switch {
		case robotsErr != 0:
			http.Error(w, "robots unavailable", robotsErr)
		case robots == "":
			http.NotFound(w, r)
		default:
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte(robots))
		}
		return
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	sum := sha256.Sum256(p.body)
	etag := `"` + hex.EncodeToString(sum[:6]) + `"`
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", p.ctype)
	_, _ = w.Write(p.body)
}

// build loads a source whose web: block is block (indented by two) and
// builds its connector.
func build(t testing.TB, block string) connectors.Connector {
	t.Helper()
	src := "name: page\nconnector: web\ntimeout: 5s\nweb:\n" + block
	dir := conntest.WriteConfig(t, map[string]string{"sources/page.yaml": src})
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

// block writes a web: block from key: value lines.
func block(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	return b.String()
}
