package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// trickle sends head at once, then slow one byte every interval, and
// reports whether the server closed the connection
// before everything was sent, and how many bytes it took. It gives up
// (not closed) after bound.
func trickle(t *testing.T, addr, head, slow string, interval, bound time.Duration) (closed bool, sent int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	eof := make(chan struct{})
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(bound))
		_, _ = io.Copy(io.Discard, conn) // until the server closes (or the bound)
		close(eof)
	}()
	if _, err := conn.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	msg := slow
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for sent < len(msg) && time.Now().Before(deadline) {
		select {
		case <-eof:
			return time.Now().Before(deadline), sent
		case <-tick.C:
		}
		if _, err := conn.Write([]byte{msg[sent]}); err != nil {
			<-eof
			return true, sent
		}
		sent++
	}
	<-eof
	return false, sent
}

// A client sending its request one byte at a time is cut on every
// surface, authenticated or not, within the limits of lookout.yaml's
// http block (body: the grace plus what the minimum rate earns; headers:
// header_timeout); a large body sent at speed passes. They held a
// connection and a handler for as long as the client liked (75 s at
// 1 byte/s).
func TestSlowRequestsAreCut(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(`sinks: {log: {type: log}}
http: {header_timeout: 500ms, body_grace: 500ms, body_min_rate: 100}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	d := clitest.StartDaemon(t, dir, runDaemon)

	// 1 byte every 50 ms earns 0.5 ms of the deadline per byte: cut about
	// half a second in, after about 10 bytes; the bound is forty times
	// that, and the request (400 body bytes) would take 20 s in full.
	const interval, bound = 50 * time.Millisecond, 20 * time.Second
	body := `{"name": "` + strings.Repeat("x", 380) + `"}`
	for _, path := range []string{"/mcp", "/admin/login", "/ingest/gh", "/v1/watches"} {
		head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: lookout\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, len(body))
		// The headers arrive at once, the body trickles.
		closed, sent := trickle(t, d.Addr, head, body, interval, bound)
		if !closed || sent >= len(body) {
			t.Errorf("POST %s with a body at 20 bytes/s: closed %v after %d of %d body bytes; want the connection closed", path, closed, sent, len(body))
		}
	}

	// Headers trickled: cut by header_timeout.
	head := "GET /v1/watches HTTP/1.1\r\nHost: lookout\r\nAuthorization: Bearer " + strings.Repeat("x", 400) + "\r\n\r\n"
	if closed, sent := trickle(t, d.Addr, "", head, interval, bound); !closed || sent >= len(head) {
		t.Errorf("headers at 20 bytes/s: closed %v after %d of %d bytes; want the connection closed", closed, sent, len(head))
	}

	// A large body sent at speed passes the same limits: the ingest reads
	// it whole and answers for the unknown source.
	big := bytes.Repeat([]byte("x"), 2<<20)
	resp, err := http.Post("http://"+d.Addr+"/ingest/gh", "application/json", bytes.NewReader(big))
	if err != nil {
		t.Fatalf("a 2 MiB body at speed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a 2 MiB body at speed to an unknown source: %d, want 404", resp.StatusCode)
	}
}
