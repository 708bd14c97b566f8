// Package imap is the imap connector: the messages of one or more
// mailboxes of an IMAP server, read with github.com/emersion/go-imap/v2 and
// parsed with github.com/emersion/go-message.
//
//	connector: imap
//	imap:
//	  host: imap.example.com
//	  username: me@example.com
//	  password: ${IMAP_PASSWORD}
//	  mailboxes: [INBOX, Lists/golang]
//
// Each new message becomes an item (see Shape for the keys). The cursor
// keeps, per mailbox, its UIDVALIDITY and the last UID read; a run reads
// the UIDs above it in pages of batch_size, each page carrying the cursor
// after it, so a run cut short resumes after its last committed page. When
// a mailbox's UIDVALIDITY changes its UIDs mean nothing any more: the
// mailbox is read again from the start, and since record ids come from the
// Message-ID header and the content (not from UIDs, nor from the order of
// the messages; see assignIDs) the re-read writes no new record and no
// change.
// Mail is read with BODY.PEEK[] from a mailbox opened with EXAMINE (read
// only), so no message is marked \Seen unless mark_seen is set.
package imap

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	goimap "github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/emersion/go-message/charset"
	"github.com/emersion/go-sasl"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
)

func init() {
	connectors.Register("imap", Decode, newFromSettings)
}

// Security is how the connection is protected.
type Security string

// Security modes.
const (
	// SecurityTLS is implicit TLS (port 993).
	SecurityTLS Security = "tls"
	// SecuritySTARTTLS upgrades a plain connection (port 143) with STARTTLS.
	SecuritySTARTTLS Security = "starttls"
	// SecurityPlain sends everything in clear: only to a loopback address,
	// or with allow_plain.
	SecurityPlain Security = "plain"
)

// Defaults of the imap: block.
const (
	BatchSizeDefault   = 50
	MaxMessagesDefault = 2000
	// MaxMessageBytes bounds what is read of one message; the rest is
	// skipped and the message is kept with a problem saying so.
	MaxMessageBytes = 32 << 20
)

// Settings is the imap: block of a source.
type Settings struct {
	// Host is the server's name or address. Required.
	Host string `yaml:"host"`
	// Port is the server's port. Defaults to 993 for tls, 143 otherwise.
	Port int `yaml:"port"`
	// Security is tls, starttls or plain. Defaults to tls.
	Security Security `yaml:"security"`
	// AllowPlain allows security: plain to a server that is not on a
	// loopback address. Defaults to false.
	AllowPlain bool `yaml:"allow_plain"`
	// CAFile is a PEM file of certificate authorities trusted besides the
	// system's, relative to the configuration directory. Defaults to none.
	CAFile string `yaml:"ca_file"`
	// Username logs in. Required.
	Username string `yaml:"username"`
	// Password logs in with AUTHENTICATE PLAIN (or LOGIN when the server
	// offers no PLAIN), written as ${ENV}. Exactly one of password,
	// oauth_token and oauth_token_file is required.
	Password string `yaml:"password"`
	// OAuthToken is an OAuth 2 access token sent with AUTHENTICATE
	// XOAUTH2, written as ${ENV}: expanded when the configuration is
	// loaded, so a new token needs a restart. Defaults to none.
	OAuthToken string `yaml:"oauth_token"`
	// OAuthTokenFile is a file holding the OAuth 2 access token sent with
	// AUTHENTICATE XOAUTH2, relative to the configuration directory. It
	// is read again at every connection (every run, every reconnect), so
	// a refresher that rewrites it (a sidecar, a cron job, a mounted
	// Kubernetes Secret) takes effect at the next run. Defaults to none.
	OAuthTokenFile string `yaml:"oauth_token_file"`
	// Mailboxes are read in order. Defaults to [INBOX].
	Mailboxes []string `yaml:"mailboxes"`
	// BatchSize is the number of messages per page (one transaction).
	// Defaults to 50.
	BatchSize int `yaml:"batch_size"`
	// MaxMessages bounds one run; the next run goes on from there.
	// Defaults to 2000.
	MaxMessages int `yaml:"max_messages"`
	// Since limits the first read of a mailbox (and a re-read after a
	// UIDVALIDITY change) to messages received within this duration.
	// Defaults to 0: every message.
	Since time.Duration `yaml:"since"`
	// MarkSeen sets \Seen on each message once its page is committed.
	// Defaults to false: mail is never marked read.
	MarkSeen bool `yaml:"mark_seen"`
	// Idle makes a run wait up to this long in IMAP IDLE on the first
	// mailbox after reading, reading each new message as it arrives.
	// Defaults to 0: no IDLE.
	Idle time.Duration `yaml:"idle"`
}

// Decode reads the imap: block of src, applies its defaults and checks it.
func Decode(src *config.Source) (*Settings, error) {
	s := &Settings{}
	if err := src.DecodeBlock(s); err != nil {
		return nil, err
	}
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, src.Errorf(key, format, args...)) }
	if s.Host == "" {
		bad("imap.host", "is required")
	} else if strings.ContainsAny(s.Host, " /:@") && net.ParseIP(s.Host) == nil {
		bad("imap.host", "must be a host name or an address, not %q", s.Host)
	}
	s.Security = cmp.Or(s.Security, SecurityTLS)
	switch s.Security {
	case SecurityTLS:
		s.Port = cmp.Or(s.Port, 993)
	case SecuritySTARTTLS, SecurityPlain:
		s.Port = cmp.Or(s.Port, 143)
	default:
		bad("imap.security", "must be tls, starttls or plain, not %q", s.Security)
	}
	// Port 0 is left only by a security that is not known, reported above.
	if s.Port != 0 && (s.Port < 1 || s.Port > 65535) {
		bad("imap.port", "must be between 1 and 65535, not %d", s.Port)
	}
	if s.AllowPlain && s.Security != SecurityPlain {
		bad("imap.allow_plain", "is only meaningful with security: plain")
	}
	if s.CAFile != "" && s.Security == SecurityPlain {
		bad("imap.ca_file", "is only meaningful with security: tls or starttls")
	}
	if s.Username == "" {
		bad("imap.username", "is required")
	}
	switch {
	case s.Password == "" && s.OAuthToken == "" && s.OAuthTokenFile == "":
		bad("imap.password", "or imap.oauth_token or imap.oauth_token_file is required")
	case s.Password != "" && s.OAuthToken != "":
		bad("imap.oauth_token", "cannot be set together with imap.password")
	case s.OAuthTokenFile != "" && s.Password != "":
		bad("imap.oauth_token_file", "cannot be set together with imap.password")
	case s.OAuthTokenFile != "" && s.OAuthToken != "":
		bad("imap.oauth_token_file", "cannot be set together with imap.oauth_token")
	}
	if strings.ContainsAny(s.OAuthToken, " \r\n") {
		bad("imap.oauth_token", "contains white space (is the ${ENV} reference right?)")
	}
	if len(s.Mailboxes) == 0 {
		s.Mailboxes = []string{"INBOX"}
	}
	seen := map[string]bool{}
	for i, m := range s.Mailboxes {
		key := fmt.Sprintf("imap.mailboxes[%d]", i)
		switch {
		case strings.TrimSpace(m) == "":
			bad(key, "is empty")
		case strings.ContainsAny(m, "\r\n"):
			bad(key, "contains a line break")
		case seen[m]:
			bad(key, "repeats mailbox %q", m)
		}
		seen[m] = true
	}
	if s.BatchSize < 0 {
		bad("imap.batch_size", "must be positive")
	}
	s.BatchSize = cmp.Or(s.BatchSize, BatchSizeDefault)
	if s.MaxMessages < 0 {
		bad("imap.max_messages", "must be positive")
	}
	s.MaxMessages = cmp.Or(s.MaxMessages, MaxMessagesDefault)
	if s.Since < 0 {
		bad("imap.since", "must not be negative")
	}
	if s.Idle < 0 {
		bad("imap.idle", "must not be negative")
	} else if s.Idle > 0 && src.StuckAfter > 0 && s.Idle >= src.StuckAfter {
		bad("imap.idle", "must be shorter than stuck_after (%s), or every idling run is reported stuck", src.StuckAfter)
	}
	return s, errors.Join(errs...)
}

// Options are the typed settings of New.
type Options struct {
	// Address is host:port. Required.
	Address string
	// Security is tls, starttls or plain. Defaults to tls.
	Security Security
	// AllowPlain allows plain to a non-loopback address.
	AllowPlain bool
	// TLS is the TLS configuration; its ServerName defaults to Address's
	// host. Defaults to the system's roots.
	TLS *tls.Config
	// Username, with Password, OAuthToken or OAuthTokenFile, logs in.
	Username, Password, OAuthToken string
	// OAuthTokenFile is a file holding the XOAUTH2 access token, read at
	// every connection. Defaults to none.
	OAuthTokenFile string
	// Mailboxes are read in order. Defaults to [INBOX].
	Mailboxes []string
	// BatchSize is messages per page. Defaults to 50.
	BatchSize int
	// MaxMessages bounds one run. Defaults to 2000.
	MaxMessages int
	// Since limits a mailbox's first read. Defaults to 0 (all).
	Since time.Duration
	// MarkSeen sets \Seen after each committed page.
	MarkSeen bool
	// Idle is the longest a run waits in IDLE; 0 does not idle.
	Idle time.Duration
	// Timeout bounds connecting and logging in. Defaults to 30s.
	Timeout time.Duration
	// Dial opens the TCP connection. Defaults to a net.Dialer.
	Dial connectors.DialFunc
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger receives warnings. Defaults to slog.Default().
	Logger *slog.Logger
}

// Connector reads the mailboxes of one account.
type Connector struct {
	o    Options
	host string
}

var _ connectors.Connector = (*Connector)(nil)

func newFromSettings(src *config.Source, s *Settings, env connectors.Env) (connectors.Connector, error) {
	tlsConf := &tls.Config{ServerName: s.Host, MinVersion: tls.VersionTLS12}
	if s.CAFile != "" {
		path := s.CAFile
		if !filepath.IsAbs(path) {
			path = filepath.Join(env.Dir, path)
		}
		pem, err := os.ReadFile(path)
		if err != nil {
			return nil, src.Errorf("imap.ca_file", "cannot be read: %v", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, src.Errorf("imap.ca_file", "holds no PEM certificate: %s", path)
		}
		tlsConf.RootCAs = pool
	}
	tokenFile := s.OAuthTokenFile
	if tokenFile != "" && !filepath.IsAbs(tokenFile) {
		tokenFile = filepath.Join(env.Dir, tokenFile)
	}
	return New(Options{
		Address: net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), Security: s.Security, AllowPlain: s.AllowPlain, TLS: tlsConf,
		Username: s.Username, Password: s.Password, OAuthToken: s.OAuthToken, OAuthTokenFile: tokenFile, Mailboxes: s.Mailboxes,
		BatchSize: s.BatchSize, MaxMessages: s.MaxMessages, Since: s.Since, MarkSeen: s.MarkSeen, Idle: s.Idle,
		Timeout: src.Timeout, Dial: env.Dial, Now: env.Now, Logger: env.Logger,
	})
}

// New returns a connector with o's settings.
func New(o Options) (*Connector, error) {
	host, _, err := net.SplitHostPort(o.Address)
	if err != nil {
		return nil, fmt.Errorf("imap address %q: %w", o.Address, err)
	}
	creds := 0
	for _, c := range []string{o.Password, o.OAuthToken, o.OAuthTokenFile} {
		if c != "" {
			creds++
		}
	}
	if o.Username == "" || creds != 1 {
		return nil, errors.New("imap: a username and exactly one of password, oauth token and oauth token file are required")
	}
	o.Security = cmp.Or(o.Security, SecurityTLS)
	if len(o.Mailboxes) == 0 {
		o.Mailboxes = []string{"INBOX"}
	}
	o.BatchSize = cmp.Or(o.BatchSize, BatchSizeDefault)
	o.MaxMessages = cmp.Or(o.MaxMessages, MaxMessagesDefault)
	o.Timeout = cmp.Or(o.Timeout, config.TimeoutDefault)
	if o.TLS == nil {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	o.TLS = o.TLS.Clone()
	o.TLS.ServerName = cmp.Or(o.TLS.ServerName, host)
	if o.Dial == nil {
		o.Dial = (&net.Dialer{}).DialContext
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Connector{o: o, host: host}, nil
}

// State is the cursor stored in sources.cursor.
type State struct {
	// Mailboxes maps a mailbox name to where its reading stands.
	Mailboxes map[string]MailboxState `json:"mailboxes"`
}

// MailboxState is where the reading of one mailbox stands.
type MailboxState struct {
	// UIDValidity is the mailbox's UIDVALIDITY when LastUID was read.
	UIDValidity uint32 `json:"uid_validity"`
	// LastUID is the highest UID read (or known to hold nothing new).
	LastUID uint32 `json:"last_uid"`
}

func (st State) encode() (json.RawMessage, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode cursor: %w", err)
	}
	return b, nil
}

// run is one Fetch in progress.
type run struct {
	c       *Connector
	client  *imapclient.Client
	wake    chan struct{}
	st      State
	emit    connectors.EmitFunc
	res     *connectors.Result
	budget  int
	damaged int    // messages kept with MIME problems
	first   string // the first of them
}

// Fetch reads the new messages of every mailbox, then idles when
// configured.
func (c *Connector) Fetch(ctx context.Context, raw json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
	var res connectors.Result
	var prev State
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &prev); err != nil {
			return res, fmt.Errorf("stored cursor is not a cursor of this connector (reset it: set the cursor of its row in the sources table to '{}'): %w", err)
		}
	}
	r := &run{c: c, st: State{Mailboxes: map[string]MailboxState{}}, emit: emit, res: &res, budget: c.o.MaxMessages,
		wake: make(chan struct{}, 1)}
	for _, m := range c.o.Mailboxes { // mailboxes no longer configured are forgotten
		if ms, ok := prev.Mailboxes[m]; ok {
			r.st.Mailboxes[m] = ms
		}
	}
	defer r.report()
	client, err := c.connect(ctx, r.wake)
	if err != nil {
		return res, err
	}
	r.client = client
	res.Requests++
	stop := context.AfterFunc(ctx, func() { client.Close() })
	defer func() {
		stop()
		r.logout()
	}()
	for _, m := range c.o.Mailboxes {
		if r.budget <= 0 {
			break
		}
		if err := r.sync(ctx, m); err != nil {
			return res, r.ctxErr(ctx, err)
		}
	}
	if c.o.Idle > 0 && r.budget > 0 {
		if err := r.idle(ctx); err != nil {
			return res, r.ctxErr(ctx, err)
		}
	}
	res.Cursor, err = r.st.encode()
	return res, err
}

// ctxErr prefers the context's error: a connection closed because ctx
// ended reads as a cancellation, not as a network failure.
func (r *run) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

func (r *run) report() {
	if r.damaged > 0 {
		r.c.o.Logger.Warn("messages had MIME parts that could not be read; kept with what could be (see their mime_errors)",
			"messages_damaged", r.damaged, "first_message", r.first)
	}
}

func (r *run) logout() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.client.Logout().Wait()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	_ = r.client.Close()
	<-done
}

// connect dials, secures the connection and logs in, all within the
// source's timeout.
func (c *Connector) connect(ctx context.Context, wake chan struct{}) (*imapclient.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	conn, err := c.o.Dial(dctx, "tcp", c.o.Address)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.o.Address, err)
	}
	// Closing the connection is how a deadline interrupts imapclient.
	stopDial := context.AfterFunc(dctx, func() { conn.Close() })
	client, err := c.handshake(dctx, conn, wake)
	if err == nil {
		err = c.login(client)
	}
	if !stopDial() {
		if client != nil {
			client.Close()
		}
		conn.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect to %s: %w", c.o.Address, ctx.Err())
		}
		return nil, fmt.Errorf("connect to %s: no greeting and login within %s: %w", c.o.Address, c.o.Timeout, context.DeadlineExceeded)
	}
	if err != nil {
		if client != nil {
			client.Close()
		}
		conn.Close()
		return nil, err
	}
	return client, nil
}

func (c *Connector) handshake(ctx context.Context, conn net.Conn, wake chan struct{}) (*imapclient.Client, error) {
	opts := &imapclient.Options{
		WordDecoder: &mime.WordDecoder{CharsetReader: charset.Reader},
		UnilateralDataHandler: &imapclient.UnilateralDataHandler{
			Mailbox: func(d *imapclient.UnilateralDataMailbox) {
				if d.NumMessages != nil {
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			},
		},
	}
	var client *imapclient.Client
	switch c.o.Security {
	case SecurityTLS:
		tconn := tls.Client(conn, c.o.TLS)
		if err := tconn.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("TLS handshake with %s: %w", c.o.Address, err)
		}
		client = imapclient.New(tconn, opts)
	case SecuritySTARTTLS:
		opts.TLSConfig = c.o.TLS
		var err error
		if client, err = imapclient.NewStartTLS(conn, opts); err != nil {
			return nil, fmt.Errorf("STARTTLS with %s: %w", c.o.Address, err)
		}
	case SecurityPlain:
		if !c.o.AllowPlain && !loopback(conn.RemoteAddr()) {
			return nil, fmt.Errorf("imap security plain to %s (%s) refused: it is not a loopback address; use tls or starttls, or set allow_plain", c.o.Address, conn.RemoteAddr())
		}
		client = imapclient.New(conn, opts)
	default:
		return nil, fmt.Errorf("imap security %q is not known", c.o.Security)
	}
	if err := client.WaitGreeting(); err != nil {
		return client, fmt.Errorf("greeting from %s: %w", c.o.Address, err)
	}
	return client, nil
}

func loopback(a net.Addr) bool {
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

func (c *Connector) login(client *imapclient.Client) error {
	var err error
	switch {
	case c.o.OAuthToken != "" || c.o.OAuthTokenFile != "":
		token, terr := c.token()
		if terr != nil {
			return terr
		}
		err = client.Authenticate(&xoauth2{user: c.o.Username, token: token})
	case client.Caps().Has(goimap.AuthCap(sasl.Plain)):
		err = client.Authenticate(sasl.NewPlainClient("", c.o.Username, c.o.Password))
	default:
		err = client.Login(c.o.Username, c.o.Password).Wait()
	}
	if err == nil {
		return nil
	}
	var ie *goimap.Error
	if errors.As(err, &ie) && ie.Type == goimap.StatusResponseTypeNo {
		if ie.Code == goimap.ResponseCodeUnavailable {
			return &connectors.RetryLaterError{RetryAt: c.o.Now().Add(time.Minute), Reason: "IMAP server unavailable: " + ie.Text}
		}
		if c.o.OAuthTokenFile != "" {
			// Not ErrUnauthorized: that disables the source until its
			// configuration changes, and the refresher only rewrites the
			// file. The run fails and the next one reads the file again.
			return fmt.Errorf("log in to %s as %s with the token of %s: %s (refused: expired? the file is read again at the next run)",
				c.o.Address, c.o.Username, c.o.OAuthTokenFile, ie.Text)
		}
		return fmt.Errorf("log in to %s as %s: %s: %w", c.o.Address, c.o.Username, ie.Text, connectors.ErrUnauthorized)
	}
	return fmt.Errorf("log in to %s as %s: %w", c.o.Address, c.o.Username, err)
}

// token returns the XOAUTH2 access token: OAuthToken, or the content of
// OAuthTokenFile read now, so that each connection uses the token the
// operator's refresher wrote last.
func (c *Connector) token() (string, error) {
	if c.o.OAuthTokenFile == "" {
		return c.o.OAuthToken, nil
	}
	b, err := os.ReadFile(c.o.OAuthTokenFile)
	if err != nil {
		return "", fmt.Errorf("read the imap access token (oauth_token_file): %w", err)
	}
	token := strings.TrimSpace(string(b))
	switch {
	case token == "":
		return "", fmt.Errorf("imap oauth_token_file %s is empty", c.o.OAuthTokenFile)
	case strings.ContainsAny(token, " \t\r\n"):
		return "", fmt.Errorf("imap oauth_token_file %s holds more than one token (white space inside)", c.o.OAuthTokenFile)
	}
	return token, nil
}

// xoauth2 is the XOAUTH2 SASL mechanism (Google, Microsoft): the initial
// response carries the user and the bearer token; on failure the server
// sends a JSON challenge, answered with an empty response to receive the
// final NO.
type xoauth2 struct{ user, token string }

func (x *xoauth2) Start() (string, []byte, error) {
	return "XOAUTH2", []byte("user=" + x.user + "\x01auth=Bearer " + x.token + "\x01\x01"), nil
}

func (x *xoauth2) Next([]byte) ([]byte, error) { return []byte{}, nil }

// sync reads the messages of mailbox above its cursor, a page at a time.
func (r *run) sync(ctx context.Context, mailbox string) error {
	o := r.c.o
	sel, err := r.client.Select(mailbox, &goimap.SelectOptions{ReadOnly: !o.MarkSeen}).Wait()
	r.res.Requests++
	if err != nil {
		return fmt.Errorf("open mailbox %q: %w", mailbox, err)
	}
	ms, known := r.st.Mailboxes[mailbox]
	if known && ms.UIDValidity != sel.UIDValidity {
		o.Logger.Warn("mailbox UIDVALIDITY changed: reading it again from the start (record ids do not depend on UIDs, so nothing is duplicated)",
			"mailbox", mailbox, "uid_validity_before", ms.UIDValidity, "uid_validity", sel.UIDValidity)
	}
	if !known || ms.UIDValidity != sel.UIDValidity {
		ms = MailboxState{UIDValidity: sel.UIDValidity}
	}
	r.st.Mailboxes[mailbox] = ms
	if sel.NumMessages == 0 || (sel.UIDNext != 0 && uint32(sel.UIDNext) <= ms.LastUID+1) {
		return nil // nothing above the cursor
	}
	crit := &goimap.SearchCriteria{UID: []goimap.UIDSet{{goimap.UIDRange{Start: goimap.UID(ms.LastUID + 1), Stop: 0}}}}
	if ms.LastUID == 0 && o.Since > 0 {
		crit.Since = o.Now().Add(-o.Since)
	}
	found, err := r.client.UIDSearch(crit, nil).Wait()
	r.res.Requests++
	if err != nil {
		return fmt.Errorf("search mailbox %q for UIDs above %d: %w", mailbox, ms.LastUID, err)
	}
	var uids []uint32
	for _, u := range found.AllUIDs() {
		if uint32(u) > ms.LastUID { // n:* always matches the last message
			uids = append(uids, uint32(u))
		}
	}
	slices.Sort(uids)
	uids = slices.Compact(uids)
	for len(uids) > 0 {
		if r.budget <= 0 {
			return nil
		}
		n := min(len(uids), o.BatchSize, r.budget)
		chunk := uids[:n]
		uids = uids[n:]
		items, err := r.fetch(ctx, mailbox, chunk)
		if err != nil {
			return err
		}
		r.budget -= n
		ms.LastUID = chunk[n-1]
		r.st.Mailboxes[mailbox] = ms
		cur, err := r.st.encode()
		if err != nil {
			return err
		}
		if err := r.emit(ctx, connectors.Page{Items: items, Cursor: cur}); err != nil {
			return err
		}
		if o.MarkSeen {
			if err := r.markSeen(mailbox, chunk); err != nil {
				return err
			}
		}
	}
	// Everything below UIDNEXT that the search could match was read: the
	// next run only looks above it (this also settles since).
	if sel.UIDNext != 0 && uint32(sel.UIDNext)-1 > ms.LastUID {
		ms.LastUID = uint32(sel.UIDNext) - 1
		r.st.Mailboxes[mailbox] = ms
	}
	return nil
}

func (r *run) markSeen(mailbox string, uids []uint32) error {
	set := goimap.UIDSet{}
	for _, u := range uids {
		set.AddNum(goimap.UID(u))
	}
	err := r.client.Store(set, &goimap.StoreFlags{Op: goimap.StoreFlagsAdd, Silent: true, Flags: []goimap.Flag{goimap.FlagSeen}}, nil).Close()
	r.res.Requests++
	if err != nil {
		return fmt.Errorf("mark %d messages of %q seen (they are stored, and stay unread): %w", len(uids), mailbox, err)
	}
	return nil
}

// fetched is one message as the server sent it, parsed and shaped.
type fetched struct {
	uid       uint32
	flags     []string
	internal  time.Time
	raw       []byte
	truncated bool
	msg       *Message
	item      connectors.Item
	content   string // contentID(msg)
	canon     []byte // the item's value without its id, canonical: the order of copies
}

// key is the group of f's id: messages of one mailbox with one
// Message-ID, or without one and with one content id.
func (f *fetched) key() string {
	if f.msg.MessageID != "" {
		return "<" + f.msg.MessageID + ">"
	}
	return f.content
}

// fetch reads the messages of uids (one page), shapes them into items
// and gives each its id (see assignIDs). A message that shares its
// Message-ID, or its content id, with others of the mailbox brings those
// others into the page too, with their ids, so that the ids of a group
// always move together.
func (r *run) fetch(ctx context.Context, mailbox string, uids []uint32) ([]connectors.Item, error) {
	page, err := r.fetchUIDs(mailbox, uids, false)
	if err != nil {
		return nil, err
	}
	members, err := r.groups(ctx, mailbox, page)
	if err != nil {
		return nil, err
	}
	var items []connectors.Item
	for _, g := range members {
		items = append(items, assignIDs(mailbox, g)...)
	}
	return items, nil
}

// fetchUIDs reads the messages of uids, in UID order. It reads whole
// messages one at a time, each bounded by MaxMessageBytes, so a page never
// holds more than its text. Damaged messages are counted for the run's
// warning unless again is set (copies read again for their group).
func (r *run) fetchUIDs(mailbox string, uids []uint32, again bool) ([]*fetched, error) {
	set := goimap.UIDSet{}
	for _, u := range uids {
		set.AddNum(goimap.UID(u))
	}
	cmd := r.client.Fetch(set, &goimap.FetchOptions{
		UID: true, Flags: true, InternalDate: true,
		BodySection: []*goimap.FetchItemBodySection{{Peek: true}}, // BODY.PEEK[]: \Seen is left alone
	})
	r.res.Requests++
	var out []*fetched
	for {
		data := cmd.Next()
		if data == nil {
			break
		}
		f := &fetched{}
		for {
			it := data.Next()
			if it == nil {
				break
			}
			switch it := it.(type) {
			case imapclient.FetchItemDataUID:
				f.uid = uint32(it.UID)
			case imapclient.FetchItemDataFlags:
				for _, fl := range it.Flags {
					f.flags = append(f.flags, string(fl))
				}
			case imapclient.FetchItemDataInternalDate:
				f.internal = it.Time
			case imapclient.FetchItemDataBodySection:
				if it.Literal == nil {
					continue
				}
				b, err := io.ReadAll(io.LimitReader(it.Literal, MaxMessageBytes))
				if err == nil {
					var rest int64
					rest, err = io.Copy(io.Discard, it.Literal)
					f.truncated = rest > 0
				}
				if err != nil {
					cmd.Close()
					return nil, fmt.Errorf("fetch messages %d to %d of %q: read message: %w", uids[0], uids[len(uids)-1], mailbox, err)
				}
				f.raw = b
			}
		}
		if f.uid == 0 || f.raw == nil || !slices.Contains(uids, f.uid) || slices.ContainsFunc(out, func(o *fetched) bool { return o.uid == f.uid }) {
			continue // a flag update the server sent unasked
		}
		m := Parse(f.raw)
		if f.truncated {
			m.Problems = append(m.Problems, fmt.Sprintf("message: larger than %d bytes; the parts past that were not read", MaxMessageBytes))
		}
		loc := fmt.Sprintf("imap://%s/%s;UID=%d", r.c.host, mailbox, f.uid)
		if len(m.Problems) > 0 && !again {
			r.damaged++
			if r.first == "" {
				r.first = loc
			}
		}
		value := Shape(mailbox, m, f.flags, f.internal)
		f.msg, f.content, f.canon = m, contentID(m), normalize.Canonical(value)
		f.raw = nil // parsed: the text is in the item
		f.item = connectors.Item{Value: value, Loc: loc}
		out = append(out, f)
	}
	if err := cmd.Close(); err != nil {
		return nil, fmt.Errorf("fetch messages %d to %d of %q: %w", uids[0], uids[len(uids)-1], mailbox, err)
	}
	slices.SortFunc(out, func(a, b *fetched) int { return cmp.Compare(a.uid, b.uid) })
	return out, nil
}

// groups returns the messages of page with, for each, every message of the
// mailbox in its group (same Message-ID; or no Message-ID and the same
// content id), found with UID SEARCH and read with one FETCH. Groups come
// in the order of their first message in page.
func (r *run) groups(ctx context.Context, mailbox string, page []*fetched) ([][]*fetched, error) {
	var keys []string
	byKey := map[string][]*fetched{}
	crit := map[string]*goimap.SearchCriteria{}
	for _, f := range page {
		k := f.key()
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
			crit[k] = groupCriteria(f.msg)
		}
		byKey[k] = append(byKey[k], f)
	}
	// The searches are sent together and answered in turn.
	cmds := make([]*imapclient.SearchCommand, len(keys))
	for i, k := range keys {
		cmds[i] = r.client.UIDSearch(crit[k], nil)
		r.res.Requests++
	}
	inPage := map[uint32]bool{}
	for _, f := range page {
		inPage[f.uid] = true
	}
	var others []uint32
	for i, k := range keys {
		found, err := cmds[i].Wait()
		if err != nil {
			var ie *goimap.Error
			if !errors.As(err, &ie) {
				return nil, fmt.Errorf("search mailbox %q for the other copies of %s: %w", mailbox, k, err)
			}
			// A refusal (a Message-ID the server cannot search for): the
			// group is what this page holds.
			r.c.o.Logger.Warn("the server refused to search for a message's other copies; its id is made from this page alone",
				"mailbox", mailbox, "group", k, "error", err)
			continue
		}
		for _, u := range found.AllUIDs() {
			if !inPage[uint32(u)] && !slices.Contains(others, uint32(u)) {
				others = append(others, uint32(u))
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(others) > 0 {
		slices.Sort(others)
		more, err := r.fetchUIDs(mailbox, others, true)
		if err != nil {
			return nil, fmt.Errorf("read the other copies of a page's messages: %w", err)
		}
		for _, f := range more {
			if k := f.key(); byKey[k] != nil { // a search matches substrings: keep the exact group
				byKey[k] = append(byKey[k], f)
			}
		}
	}
	out := make([][]*fetched, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out, nil
}

// groupCriteria finds the messages that may be in m's group: those with
// m's Message-ID; without one, those that have none either, with m's
// subject, sent within a day of m's date. The results are narrowed to the
// exact group once read.
func groupCriteria(m *Message) *goimap.SearchCriteria {
	if m.MessageID != "" {
		return &goimap.SearchCriteria{Header: []goimap.SearchCriteriaHeaderField{{Key: "Message-ID", Value: m.MessageID}}}
	}
	c := &goimap.SearchCriteria{}
	if !m.hasMessageID {
		c.Not = []goimap.SearchCriteria{{Header: []goimap.SearchCriteriaHeaderField{{Key: "Message-ID", Value: ""}}}}
	}
	if m.Subject != "" {
		c.Header = append(c.Header, goimap.SearchCriteriaHeaderField{Key: "Subject", Value: m.Subject})
	}
	if !m.Date.IsZero() {
		// SENTON compares dates without their zones: a day on each side.
		day := time.Date(m.Date.Year(), m.Date.Month(), m.Date.Day(), 0, 0, 0, 0, time.UTC)
		c.SentSince, c.SentBefore = day.AddDate(0, 0, -1), day.AddDate(0, 0, 2)
	}
	return c
}

// assignIDs gives each message of one group its id. The group is sorted
// by content (content id, then the whole item without its id; the UID
// only between messages that are the same in every field, where the
// order shows nowhere), so the ids do not depend on UIDs and survive a
// UIDVALIDITY change:
//
//	first message    mailbox <Message-ID>            mailbox sha256:<content id>
//	the others       mailbox <Message-ID> sha256:<content id>
//	a further copy   … #2, #3 (same content id as an earlier one)
func assignIDs(mailbox string, g []*fetched) []connectors.Item {
	slices.SortFunc(g, func(a, b *fetched) int {
		return cmp.Or(strings.Compare(a.content, b.content), bytes.Compare(a.canon, b.canon), cmp.Compare(a.uid, b.uid))
	})
	seen := map[string]int{}
	items := make([]connectors.Item, len(g))
	for i, f := range g {
		mid := f.msg.MessageID
		var id string
		switch {
		case mid != "" && i == 0:
			id = mailbox + " <" + mid + ">"
		case mid != "":
			id = mailbox + " <" + mid + "> " + f.content
		default:
			id = mailbox + " " + f.content
		}
		if mid == "" || i > 0 {
			if n := seen[f.content]; n > 0 {
				id += " #" + strconv.Itoa(n+1)
			}
			seen[f.content]++
		}
		value := maps.Clone(f.item.Value.(map[string]any))
		value["id"] = id
		items[i] = connectors.Item{Value: value, Loc: f.item.Loc}
	}
	return items
}

// idle waits in IDLE on the first mailbox for up to Idle, reading what
// arrives. A connection that drops while idling ends the run without
// error: everything read is committed, and the next run reads on.
func (r *run) idle(ctx context.Context) error {
	o := r.c.o
	mailbox := o.Mailboxes[0]
	caps := r.client.Caps()
	if !caps.Has(goimap.CapIdle) {
		o.Logger.Warn("the server does not support IDLE; the run does not wait for new mail", "mailbox", mailbox)
		return nil
	}
	timer := time.NewTimer(o.Idle)
	defer timer.Stop()
	for {
		select { // a wake-up that the reading itself caused
		case <-r.wake:
		default:
		}
		r.budget = o.MaxMessages
		if err := r.sync(ctx, mailbox); err != nil {
			if ctx.Err() != nil {
				return err
			}
			var ie *goimap.Error
			if errors.As(err, &ie) { // a refusal, not a lost connection
				return err
			}
			o.Logger.Warn("connection lost while idling; the next run reads on", "mailbox", mailbox, "error", err)
			return nil
		}
		cmd, err := r.client.Idle()
		r.res.Requests++
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			o.Logger.Warn("IDLE failed; the next run reads on", "mailbox", mailbox, "error", err)
			return nil
		}
		done := false
		select {
		case <-r.wake:
		case <-timer.C:
			done = true
		case <-ctx.Done():
			cmd.Close()
			return ctx.Err()
		case <-r.client.Closed():
			o.Logger.Warn("connection closed while idling; the next run reads on", "mailbox", mailbox)
			return nil
		}
		err = cmd.Close()
		if err == nil {
			err = cmd.Wait()
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			o.Logger.Warn("leaving IDLE failed; the next run reads on", "mailbox", mailbox, "error", err)
			return nil
		}
		if done {
			return nil
		}
	}
}
