package imap_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goimap "github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/emersion/go-imap/v2/imapserver"
	"github.com/emersion/go-imap/v2/imapserver/imapmemserver"
	"github.com/emersion/go-sasl"
)

// A real IMAP server in the test process: go-imap's server with its
// in-memory backend, on 127.0.0.1, wrapped to accept XOAUTH2 and to cut
// connections in the middle of a FETCH.
type testServer struct {
	t        testing.TB
	user     *imapmemserver.User
	addr     string
	password string
	token    atomic.Pointer[string] // the XOAUTH2 bearer token accepted
	// dropAfter, when >= 0, is how many messages the server sends in
	// FETCH responses over all connections before it closes the
	// connection in the middle of the FETCH that would exceed it.
	dropAfter atomic.Int64
	served    atomic.Int64
	fetches   atomic.Int64
	// certPEM is the server's self-signed certificate (tls modes).
	certPEM []byte
	// idling receives a value each time a client enters IDLE.
	idling chan struct{}
}

type serverMode int

const (
	modePlain serverMode = iota
	modeTLS
	modeSTARTTLS
)

const (
	testUser     = "me@example.test"
	testPassword = "hunter2"
	testToken    = "ya29.test-token"
)

func newTestServer(t testing.TB, mode serverMode, mailboxes ...string) *testServer {
	t.Helper()
	ts := &testServer{t: t, user: imapmemserver.NewUser(testUser, testPassword), password: testPassword, idling: make(chan struct{}, 8)}
	ts.acceptToken(testToken)
	ts.dropAfter.Store(-1)
	for _, m := range append([]string{"INBOX"}, mailboxes...) {
		if err := ts.user.Create(m, nil); err != nil {
			t.Fatalf("create mailbox %s: %v", m, err)
		}
	}
	mem := imapmemserver.New()
	mem.AddUser(ts.user)
	opts := &imapserver.Options{
		NewSession: func(c *imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
			return &session{Session: mem.NewSession(), ts: ts, conn: c}, nil, nil
		},
		Caps:         goimap.CapSet{goimap.CapIMAP4rev1: {}},
		InsecureAuth: mode == modePlain,
		Logger:       log.New(io.Discard, "", 0),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if mode != modePlain {
		cert, certPEM := selfSigned(t)
		ts.certPEM = certPEM
		conf := &tls.Config{Certificates: []tls.Certificate{cert}}
		if mode == modeTLS {
			ln = tls.NewListener(ln, conf)
		} else {
			opts.TLSConfig = conf
		}
	}
	srv := imapserver.New(opts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	ts.addr = ln.Addr().String()
	return ts
}

// session wraps the in-memory session.
type session struct {
	imapserver.Session
	ts   *testServer
	conn *imapserver.Conn
}

var _ imapserver.SessionSASL = (*session)(nil)

func (s *session) AuthenticateMechanisms() []string { return []string{sasl.Plain, "XOAUTH2"} }

func (s *session) Authenticate(mech string) (sasl.Server, error) {
	switch mech {
	case sasl.Plain:
		return sasl.NewPlainServer(func(identity, username, password string) error {
			return s.Login(username, password)
		}), nil
	case "XOAUTH2":
		return &xoauth2Server{s: s}, nil
	}
	return nil, &goimap.Error{Type: goimap.StatusResponseTypeNo, Text: "unsupported mechanism"}
}

// acceptToken makes token the only XOAUTH2 token the server accepts (the
// previous one expired).
func (ts *testServer) acceptToken(token string) { ts.token.Store(&token) }

// xoauth2Server checks "user=U\x01auth=Bearer T\x01\x01"; a bad token
// gets the JSON challenge real servers send, then NO.
type xoauth2Server struct {
	s      *session
	failed bool
}

func (x *xoauth2Server) Next(resp []byte) ([]byte, bool, error) {
	if x.failed {
		return nil, true, imapserver.ErrAuthFailed
	}
	var user, token string
	for _, kv := range strings.Split(string(resp), "\x01") {
		if v, ok := strings.CutPrefix(kv, "user="); ok {
			user = v
		}
		if v, ok := strings.CutPrefix(kv, "auth=Bearer "); ok {
			token = v
		}
	}
	if token != *x.s.ts.token.Load() {
		x.failed = true
		return []byte(`{"status":"401","schemes":"bearer","scope":"https://mail.google.com/"}`), false, nil
	}
	return nil, true, x.s.Login(user, x.s.ts.password)
}

// Fetch serves messages until the server's drop budget is spent, then
// closes the connection in the middle of the FETCH.
func (s *session) Fetch(w *imapserver.FetchWriter, numSet goimap.NumSet, options *goimap.FetchOptions) error {
	s.ts.fetches.Add(1)
	limit := s.ts.dropAfter.Load()
	uids, ok := numSet.(goimap.UIDSet)
	if limit < 0 || !ok {
		return s.Session.Fetch(w, numSet, options)
	}
	list, _ := uids.Nums()
	left := limit - s.ts.served.Load()
	if int64(len(list)) <= left {
		s.ts.served.Add(int64(len(list)))
		return s.Session.Fetch(w, numSet, options)
	}
	if left > 0 {
		s.ts.served.Add(left)
		if err := s.Session.Fetch(w, goimap.UIDSetNum(list[:left]...), options); err != nil {
			return err
		}
	}
	s.ts.dropAfter.Store(-1) // the next connection is served in full
	s.conn.NetConn().Close()
	return io.ErrUnexpectedEOF
}

// Idle tells the test that a client is idling.
func (s *session) Idle(w *imapserver.UpdateWriter, stop <-chan struct{}) error {
	select {
	case s.ts.idling <- struct{}{}:
	default:
	}
	return s.Session.Idle(w, stop)
}

// appendMsg adds a raw message (LF line ends become CRLF) to mailbox.
func (ts *testServer) appendMsg(mailbox, raw string, flags ...goimap.Flag) goimap.UID {
	ts.t.Helper()
	raw = strings.ReplaceAll(strings.ReplaceAll(raw, "\r\n", "\n"), "\n", "\r\n")
	data, err := ts.user.Append(mailbox, bytes.NewReader([]byte(raw)), &goimap.AppendOptions{
		Flags: flags, Time: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC),
	})
	if err != nil {
		ts.t.Fatalf("append to %s: %v", mailbox, err)
	}
	return data.UID
}

// flags reads every message's flags in mailbox, by UID, over a separate
// connection that only asks for FLAGS.
func (ts *testServer) flags(mailbox string) map[goimap.UID][]goimap.Flag {
	ts.t.Helper()
	c, err := imapclient.DialInsecure(ts.addr, nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(testUser, testPassword).Wait(); err != nil {
		ts.t.Fatal(err)
	}
	if _, err := c.Select(mailbox, &goimap.SelectOptions{ReadOnly: true}).Wait(); err != nil {
		ts.t.Fatal(err)
	}
	msgs, err := c.Fetch(goimap.UIDSet{goimap.UIDRange{Start: 1, Stop: 0}}, &goimap.FetchOptions{UID: true, Flags: true}).Collect()
	if err != nil {
		ts.t.Fatal(err)
	}
	out := map[goimap.UID][]goimap.Flag{}
	for _, m := range msgs {
		out[m.UID] = m.Flags
	}
	return out
}

// mail builds a simple text message.
func mail(id, subject, body string) string {
	hdr := ""
	if id != "" {
		hdr = "Message-ID: <" + id + ">\n"
	}
	return hdr + `From: "Ada Lovelace" <ada@example.test>
To: me@example.test, Bob <bob@example.test>
Cc: carol@example.test
Subject: ` + subject + `
Date: Sun, 01 Mar 2026 09:00:00 +0100
MIME-Version: 1.0
Content-Type: text/plain; charset=utf-8

` + body + "\n"
}

func selfSigned(t testing.TB) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "imap test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert, certPEM
}

// logBuffer collects a logger's output.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
