package health

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func readiness(t *testing.T, body string) Readiness {
	t.Helper()
	var r Readiness
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("readyz body is not JSON: %v\n%s", err, body)
	}
	return r
}

// closedPortPool is a pool pointed at a port nothing listens on.
func closedPortPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	pool, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://lookout@%s/lookout?connect_timeout=1", addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestReadyzHealthyDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	var listening atomic.Bool
	listening.Store(true)
	s := New(":0", nil, []Check{Database(pool), Migrations(pool), Listener("changes_listener", listening.Load)}, slog.New(slog.DiscardHandler))
	h := s.Handler()

	code, body := get(t, h, "/readyz")
	if code != http.StatusOK {
		t.Fatalf("readyz = %d, want 200:\n%s", code, body)
	}
	r := readiness(t, body)
	if r.Status != "ready" || len(r.Failed) != 0 || len(r.Checks) != 3 {
		t.Errorf("readiness = %+v", r)
	}
	if code, body := get(t, h, "/healthz"); code != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Errorf("healthz = %d %s", code, body)
	}

	// The listener drops: not ready, and the body says which check.
	listening.Store(false)
	code, body = get(t, h, "/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with the listener down = %d, want 503", code)
	}
	if r := readiness(t, body); !slices.Equal(r.Failed, []string{"changes_listener"}) {
		t.Errorf("failed = %v, want [changes_listener]", r.Failed)
	}
}

func TestReadyzDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	pool := closedPortPool(t)
	s := New(":0", nil, []Check{Database(pool), Migrations(pool)}, slog.New(slog.DiscardHandler))
	code, body := get(t, s.Handler(), "/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("readyz = %d, want 503", code)
	}
	r := readiness(t, body)
	if r.Status != "not ready" || !slices.Equal(r.Failed, []string{"database", "migrations"}) {
		t.Errorf("readiness = %+v, want database and migrations failed", r)
	}
	if !strings.Contains(r.Checks[0].Error, "ping") {
		t.Errorf("database error = %q", r.Checks[0].Error)
	}
	// The process itself is alive.
	if code, _ := get(t, s.Handler(), "/healthz"); code != http.StatusOK {
		t.Errorf("healthz = %d, want 200", code)
	}
}

func TestReadyzMigrations(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := New(":0", nil, []Check{Database(pool), Migrations(pool)}, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	tests := []struct {
		name, sql, want string
	}{
		{"behind", `UPDATE schema_migrations SET version = version - 1`, "this binary needs"},
		{"dirty", `UPDATE schema_migrations SET version = version + 1, dirty = true`, "dirty"},
		{"none", `DELETE FROM schema_migrations`, "no migration applied"},
		{"no table", `DROP TABLE schema_migrations`, "no migration applied"},
	}
	for _, tt := range tests {
		if _, err := pool.Exec(ctx, tt.sql); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		code, body := get(t, s.Handler(), "/readyz")
		r := readiness(t, body)
		if code != http.StatusServiceUnavailable || !slices.Equal(r.Failed, []string{"migrations"}) {
			t.Errorf("%s: readyz = %d %v, want 503 with migrations failed", tt.name, code, r.Failed)
			continue
		}
		if !strings.Contains(r.Checks[1].Error, tt.want) {
			t.Errorf("%s: error %q, want it to mention %q", tt.name, r.Checks[1].Error, tt.want)
		}
	}
}

// A schema one release ahead (a newer migrate Job ran during a rolling
// upgrade) keeps an old pod ready, with a warning that says so.
func TestReadyzSchemaAheadIsAWarning(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := New(":0", nil, []Check{Database(pool), Migrations(pool)}, slog.New(slog.DiscardHandler))
	if _, err := pool.Exec(context.Background(), `UPDATE schema_migrations SET version = version + 1, dirty = false`); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, s.Handler(), "/readyz")
	r := readiness(t, body)
	if code != http.StatusOK || len(r.Failed) != 0 {
		t.Fatalf("readyz = %d %v, want 200 with nothing failed: %s", code, r.Failed, body)
	}
	if w := r.Checks[1].Warning; !strings.Contains(w, "newer than this binary") || !r.Checks[1].OK {
		t.Errorf("migrations check = %+v, want ok with a warning about the newer schema", r.Checks[1])
	}
}

func TestServerServesAndStops(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.InitConnector("file")
	m.PollStarted("file")
	s := New("127.0.0.1:0", m.Handler(nil), nil, slog.New(slog.DiscardHandler))
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `lookout_polls_started_total{connector="file"} 1`) {
		t.Errorf("metrics = %d:\n%.2000s", resp.StatusCode, body)
	}

	// A second server on the same port fails at Start, naming the address.
	other := New(s.Addr(), nil, nil, slog.New(slog.DiscardHandler))
	if err := other.Start(context.Background()); err == nil || !strings.Contains(err.Error(), s.Addr()) {
		t.Errorf("Start on a used port: %v", err)
	}

	addr := s.Addr()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Errorf("server still answers after Stop")
	}
}

// A connection a client opened and never sent a request on (a browser's
// preconnect) does not make the stop fail: it is closed after the grace
// period, and Stop returns nil. Shutdown alone counts such a connection as
// busy until it is five seconds old, and the stop failed with "context
// deadline exceeded" (the admin page's browser test, now and then).
func TestStopClosesAConnectionWithoutARequest(t *testing.T) {
	t.Parallel()
	s := New("127.0.0.1:0", nil, nil, slog.New(slog.DiscardHandler))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop with a connection that sent no request: %v", err)
	}
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("the connection is still open after Stop")
	}
}
