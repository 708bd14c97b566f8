package email

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/lookout-dev/lookout/internal/notify"
)

// smtpServer is an in-process SMTP submission server (go-smtp) with
// STARTTLS on a self-signed certificate and AUTH PLAIN.
type smtpServer struct {
	addr    string
	port    int
	roots   *x509.CertPool
	user    string
	pass    string
	reject  string // a recipient answered with 550
	tempErr bool   // answer DATA with 451

	mu   sync.Mutex
	msgs []receivedMail
}

type receivedMail struct {
	from    string
	to      []string
	data    []byte
	tls     bool
	authed  string
	session int
}

func newSMTPServer(t *testing.T, withTLS bool) *smtpServer {
	t.Helper()
	s := &smtpServer{user: "lookout", pass: "pa55"}
	srv := smtp.NewServer(s)
	srv.Domain = "localhost"
	srv.ReadTimeout = 10 * time.Second
	srv.WriteTimeout = 10 * time.Second
	if withTLS {
		cert, roots := selfSigned(t)
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
		s.roots = roots
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = "127.0.0.1"
	s.port = ln.Addr().(*net.TCPAddr).Port
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = ln.Close() // Serve may not have registered it yet
		<-done
	})
	return s
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots
}

func (s *smtpServer) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &smtpSession{srv: s, conn: c}, nil
}

func (s *smtpServer) received() []receivedMail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]receivedMail(nil), s.msgs...)
}

type smtpSession struct {
	srv    *smtpServer
	conn   *smtp.Conn
	from   string
	to     []string
	authed string
}

func (s *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *smtpSession) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, username, password string) error {
		if username != s.srv.user || password != s.srv.pass {
			return errors.New("invalid credentials")
		}
		s.authed = username
		return nil
	}), nil
}

func (s *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.authed == "" {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "authentication required"}
	}
	s.from = from
	return nil
}

func (s *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if to == s.srv.reject {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
	}
	s.to = append(s.to, to)
	return nil
}

func (s *smtpSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if s.srv.tempErr {
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"}
	}
	_, isTLS := s.conn.TLSConnectionState()
	s.srv.mu.Lock()
	s.srv.msgs = append(s.srv.msgs, receivedMail{from: s.from, to: s.to, data: b, tls: isTLS, authed: s.authed})
	s.srv.mu.Unlock()
	return nil
}

func (s *smtpSession) Reset()        { s.from, s.to = "", nil }
func (s *smtpSession) Logout() error { return nil }

func (s *smtpServer) sink(t *testing.T, mut func(*Options)) *Sink {
	t.Helper()
	o := Options{Host: s.addr, Port: s.port, Username: s.user, Password: s.pass, From: "lookout@example.com",
		To: []string{"ops@example.com", "oncall@example.com"}, StartTLS: "required",
		TLSConfig: &tls.Config{RootCAs: s.roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
	if mut != nil {
		mut(&o)
	}
	sink, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return sink
}

func TestEmailSinkSendsTextAndHTMLOverSTARTTLS(t *testing.T) {
	t.Parallel()
	srv := newSMTPServer(t, true)
	n := testNotification()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.sink(t, nil).Deliver(ctx, n); err != nil {
		t.Fatal(err)
	}
	// A repeat (after a crash) carries the same Message-ID.
	n.Attempt, n.DeliveryID = 2, "7-2-def"
	if err := srv.sink(t, nil).Deliver(ctx, n); err != nil {
		t.Fatal(err)
	}
	got := srv.received()
	if len(got) != 2 {
		t.Fatalf("server received %d messages, want 2", len(got))
	}
	m := got[0]
	if !m.tls || m.authed != "lookout" || m.from != "lookout@example.com" || strings.Join(m.to, ",") != "ops@example.com,oncall@example.com" {
		t.Errorf("envelope: tls %t, auth %q, from %q, to %v", m.tls, m.authed, m.from, m.to)
	}
	msg, err := mail.ReadMessage(strings.NewReader(string(m.data)))
	if err != nil {
		t.Fatal(err)
	}
	subject, _ := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if subject != n.Title {
		t.Errorf("Subject = %q, want %q", subject, n.Title)
	}
	for h, want := range map[string]string{
		"X-Lookout-Dedupe-Key": n.DedupeKey, "Auto-Submitted": "auto-generated", "X-Lookout-Urgency": "high",
		"Message-Id": "<" + MessageID(n.DedupeKey, n.Sink, "lookout@example.com") + ">",
	} {
		if got := msg.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	second, _ := mail.ReadMessage(strings.NewReader(string(got[1].data)))
	if second.Header.Get("Message-Id") != msg.Header.Get("Message-Id") || second.Header.Get("X-Lookout-Delivery") == msg.Header.Get("X-Lookout-Delivery") {
		t.Errorf("repeat: Message-ID %q vs %q, delivery %q vs %q", second.Header.Get("Message-Id"), msg.Header.Get("Message-Id"),
			second.Header.Get("X-Lookout-Delivery"), msg.Header.Get("X-Lookout-Delivery"))
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/alternative" {
		t.Fatalf("Content-Type = %q (%v), want multipart/alternative", msg.Header.Get("Content-Type"), err)
	}
	parts := map[string]string{}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		b, _ := io.ReadAll(p) // multipart decodes quoted-printable
		parts[ct] = string(b)
	}
	if txt := parts["text/plain"]; !strings.Contains(txt, "The disk is full.") || !strings.Contains(txt, "https://example.com/r1") {
		t.Errorf("text/plain part = %q", txt)
	}
	if html := parts["text/html"]; !strings.Contains(html, `<a href="https://example.com/r1">[w] Disk &lt;full&gt; &amp; failing</a>`) ||
		!strings.Contains(html, "Second paragraph.") {
		t.Errorf("text/html part = %q", html)
	}
}

func TestEmailSinkFailures(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var perm *notify.PermanentError

	t.Run("rejected recipient is permanent", func(t *testing.T) {
		t.Parallel()
		srv := newSMTPServer(t, true)
		srv.reject = "oncall@example.com"
		err := srv.sink(t, nil).Deliver(ctx, testNotification())
		if !errors.As(err, &perm) || !strings.Contains(err.Error(), "550") {
			t.Errorf("Deliver = %v, want a permanent 550", err)
		}
	})
	t.Run("temporary answer is retried", func(t *testing.T) {
		t.Parallel()
		srv := newSMTPServer(t, true)
		srv.tempErr = true
		err := srv.sink(t, nil).Deliver(ctx, testNotification())
		if err == nil || errors.As(err, &perm) {
			t.Errorf("Deliver = %v, want a retryable error", err)
		}
	})
	t.Run("wrong password is retried", func(t *testing.T) {
		t.Parallel()
		srv := newSMTPServer(t, true)
		err := srv.sink(t, func(o *Options) { o.Password = "wrong" }).Deliver(ctx, testNotification())
		if err == nil || errors.As(err, &perm) || len(srv.received()) != 0 {
			t.Errorf("Deliver = %v, want a retryable auth failure and nothing sent", err)
		}
	})
	t.Run("required STARTTLS refuses a server without it", func(t *testing.T) {
		t.Parallel()
		srv := newSMTPServer(t, false)
		err := srv.sink(t, nil).Deliver(ctx, testNotification())
		if err == nil || len(srv.received()) != 0 {
			t.Errorf("Deliver = %v, want a refusal and nothing sent", err)
		}
	})
	t.Run("untrusted certificate is refused", func(t *testing.T) {
		t.Parallel()
		srv := newSMTPServer(t, true)
		err := srv.sink(t, func(o *Options) { o.TLSConfig = &tls.Config{ServerName: "127.0.0.1"} }).Deliver(ctx, testNotification())
		if err == nil || len(srv.received()) != 0 {
			t.Errorf("Deliver = %v, want a TLS failure", err)
		}
	})
	t.Run("no STARTTLS with a password is a config error", func(t *testing.T) {
		t.Parallel()
		_, err := New(Options{Host: "h", From: "a@b.c", To: []string{"d@e.f"}, Username: "u", StartTLS: "none"})
		if err == nil {
			t.Error("accepted a password over a clear-text connection")
		}
	})
}

func testNotification() *notify.Notification {
	return &notify.Notification{ID: 7, DedupeKey: "src/r1/w/v2-abc", Sink: "s", Source: "src", RecordID: "r1", Watch: "w",
		Kind: notify.KindSingle, Title: "[w] Disk <full> & failing", Body: "The disk is full.\n\nSecond paragraph.", Urgency: "high",
		Reason: "status changed", Attempt: 1, DeliveryID: "7-1-abc",
		Payload: notify.Payload{NotificationID: 7, DedupeKey: "src/r1/w/v2-abc", Kind: notify.KindSingle, Title: "[w] Disk <full> & failing",
			Record: notify.PayloadRecord{ID: "r1", URL: "https://example.com/r1"}, Urgency: "high", Reason: "status changed"}}
}
