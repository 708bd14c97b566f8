package syncer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	_ "github.com/lookout-dev/lookout/internal/connectors/imap"
)

// TestEgressPolicyOfIMAPSources: the imap connector dials through the
// syncer's egress policy too (connectors.Env.Dial), not only HTTP: with
// deny_private a loopback IMAP server is refused before connecting.
func TestEgressPolicyOfIMAPSources(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // a server that hangs up at once
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	pass := setSecret(t, "PASS", "pw")
	body := fmt.Sprintf("name: mail\nconnector: imap\nevery: 1h\njitter: 0s\ntimeout: 5s\nimap:\n  host: 127.0.0.1\n  port: %s\n  security: plain\n  username: u\n  password: ${%s}\n", port, pass)
	cfg := writeSources(t, "egress: {deny_private: true}\n", map[string]string{"mail": body})
	h := newHarness(t)
	conf := FromConfig(cfg)
	conf.Owner, conf.Now = "test", h.clock.Now
	s, err := New(h.pool, conf, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.runDue(s)
	if r := h.source("mail"); !strings.Contains(r.LastError, "egress policy refuses connections to 127.0.0.1:"+port) {
		t.Errorf("last_error %q, want the egress refusal", r.LastError)
	}
}
