package imap_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	goimap "github.com/emersion/go-imap/v2"
	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/imap"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// connect builds a connector to ts over plain IMAP on loopback, batch
// size 2, reading INBOX; set changes the options.
func connect(t *testing.T, ts *testServer, set func(*imap.Options)) *imap.Connector {
	t.Helper()
	o := imap.Options{
		Address: ts.addr, Security: imap.SecurityPlain, Username: testUser, Password: testPassword,
		Mailboxes: []string{"INBOX"}, BatchSize: 2, Logger: slog.New(slog.DiscardHandler),
	}
	if set != nil {
		set(&o)
	}
	c, err := imap.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func cursorOf(t *testing.T, raw json.RawMessage) imap.State {
	t.Helper()
	var st imap.State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("cursor %s: %v", raw, err)
	}
	return st
}

// countKinds counts the changes of source by kind, and the changes per
// record id.
func countKinds(cs []conntest.Change) (kinds map[string]int, perRecord map[string]int) {
	kinds, perRecord = map[string]int{}, map[string]int{}
	for _, c := range cs {
		kinds[c.Kind]++
		perRecord[c.RecordID]++
	}
	return kinds, perRecord
}

// The first run reads every message of two mailboxes, a page of
// batch_size at a time, each page carrying the cursor after it; the
// records carry the message's headers, text, attachments, flags and
// mailbox.
func TestInitialSyncAcrossTwoMailboxes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ts := newTestServer(t, modePlain, "Lists/golang")
	ts.appendMsg("INBOX", mail("a1@example.test", "Invoice overdue", "Please pay invoice 42."), goimap.FlagFlagged)
	ts.appendMsg("INBOX", mail("a2@example.test", "Lunch?", "Noon at the usual place."))
	ts.appendMsg("INBOX", `Message-ID: <a3@example.test>
From: billing@example.test
To: me@example.test
Subject: =?utf-8?q?R=C3=A9sum=C3=A9?= attached
Date: Mon, 02 Mar 2026 10:30:00 +0000
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="b1"

--b1
Content-Type: text/plain; charset=iso-8859-1
Content-Transfer-Encoding: quoted-printable

Voici mon r=E9sum=E9.
--b1
Content-Type: application/pdf; name="cv.pdf"
Content-Disposition: attachment; filename="cv.pdf"
Content-Transfer-Encoding: base64

JVBERi0xLjQK
--b1--
`, goimap.FlagSeen)
	ts.appendMsg("Lists/golang", mail("g1@example.test", "Go 1.27 released", "Release notes inside."))
	ts.appendMsg("Lists/golang", mail("g2@example.test", "Proposal: iterators", "Discussion."))

	c := connect(t, ts, func(o *imap.Options) { o.Mailboxes = []string{"INBOX", "Lists/golang"} })
	r := conntest.Fetch(t, c, nil)
	if r.Err != nil {
		t.Fatalf("fetch: %v", r.Err)
	}
	if r.Result.Complete || r.Snapshot {
		t.Errorf("imap is incremental: complete %v snapshot %v", r.Result.Complete, r.Snapshot)
	}
	want := []string{"INBOX <a1@example.test>", "INBOX <a2@example.test>", "INBOX <a3@example.test>",
		"Lists/golang <g1@example.test>", "Lists/golang <g2@example.test>"}
	if got := r.IDs(); !slices.Equal(got, want) {
		t.Fatalf("ids = %q, want %q", got, want)
	}
	// Pages of two per mailbox: INBOX 2+1, Lists/golang 2; each page's
	// cursor moves only its own mailbox.
	if len(r.Pages) != 3 {
		t.Fatalf("pages = %d, want 3", len(r.Pages))
	}
	first := cursorOf(t, r.Pages[0].Cursor)
	if ms := first.Mailboxes["INBOX"]; ms.LastUID != 2 || ms.UIDValidity == 0 {
		t.Errorf("cursor after page 1 = %+v", first)
	}
	if _, ok := first.Mailboxes["Lists/golang"]; ok {
		t.Errorf("page 1 cursor already names Lists/golang: %+v", first)
	}
	final := cursorOf(t, r.Result.Cursor)
	if final.Mailboxes["INBOX"].LastUID != 3 || final.Mailboxes["Lists/golang"].LastUID != 2 {
		t.Errorf("final cursor = %+v", final)
	}

	items := r.Items()
	a1 := items[0]
	check := func(m map[string]any, key string, want any) {
		t.Helper()
		got, _ := json.Marshal(m[key])
		w, _ := json.Marshal(want)
		if string(got) != string(w) {
			t.Errorf("%s: %s = %s, want %s", m["id"], key, got, w)
		}
	}
	check(a1, "message_id", "a1@example.test")
	check(a1, "mailbox", "INBOX")
	check(a1, "title", "Invoice overdue")
	check(a1, "author", "Ada Lovelace <ada@example.test>")
	check(a1, "from", []string{"Ada Lovelace <ada@example.test>"})
	check(a1, "to", []string{"me@example.test", "Bob <bob@example.test>"})
	check(a1, "cc", []string{"carol@example.test"})
	check(a1, "created_at", "2026-03-01T08:00:00Z")
	check(a1, "body", "Please pay invoice 42.")
	check(a1, "flags", []string{`\Flagged`})
	if _, ok := a1["attachments"]; ok {
		t.Errorf("a1 has attachments: %v", a1["attachments"])
	}
	a3 := items[2]
	check(a3, "title", "Résumé attached")
	check(a3, "body", "Voici mon résumé.")
	check(a3, "attachments", []string{"cv.pdf"})
	check(a3, "flags", []string{`\Seen`})
	check(a3, "created_at", "2026-03-02T10:30:00Z")
	check(items[3], "mailbox", "Lists/golang")

	// Mirrored through the one writer of records: five records, created once each.
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r)
	kinds, _ := countKinds(conntest.Changes(t, pool, "mail"))
	if kinds["created"] != 5 || len(kinds) != 1 {
		t.Fatalf("changes = %v, want 5 created", kinds)
	}
	var title, author string
	var extra map[string]any
	if err := pool.QueryRow(context.Background(), `SELECT title, author, extra FROM records WHERE source = 'mail' AND record_id = $1`,
		"INBOX <a3@example.test>").Scan(&title, &author, &extra); err != nil {
		t.Fatal(err)
	}
	if title != "Résumé attached" || author != "billing@example.test" || extra["mailbox"] != "INBOX" || extra["attachments"] == nil {
		t.Errorf("record: title %q author %q extra %v", title, author, extra)
	}
}

// A later run reads only the UIDs above the cursor; a run with nothing
// new reads no message at all.
func TestIncrementalSyncReadsOnlyNewUIDs(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ts := newTestServer(t, modePlain)
	for i := 1; i <= 3; i++ {
		ts.appendMsg("INBOX", mail(fmt.Sprintf("m%d@x", i), fmt.Sprintf("message %d", i), "text"))
	}
	c := connect(t, ts, nil)
	r1 := conntest.Fetch(t, c, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r1)

	ts.appendMsg("INBOX", mail("m4@x", "message 4", "text"))
	ts.appendMsg("INBOX", mail("m5@x", "message 5", "text"))
	fetchesBefore := ts.fetches.Load()
	r2 := conntest.Fetch(t, c, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	if got := r2.IDs(); !slices.Equal(got, []string{"INBOX <m4@x>", "INBOX <m5@x>"}) {
		t.Fatalf("second run ids = %q, want only the new messages", got)
	}
	if n := ts.fetches.Load() - fetchesBefore; n != 1 {
		t.Errorf("second run sent %d FETCH commands, want 1", n)
	}
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r2)

	fetchesBefore = ts.fetches.Load()
	r3 := conntest.Fetch(t, c, r2.Cursor(r1.Cursor(nil)))
	if r3.Err != nil || len(r3.Items()) != 0 {
		t.Fatalf("third run: %d items, err %v; want none", len(r3.Items()), r3.Err)
	}
	if n := ts.fetches.Load() - fetchesBefore; n != 0 {
		t.Errorf("a run with nothing new sent %d FETCH commands", n)
	}
	if st := cursorOf(t, r3.Result.Cursor); st.Mailboxes["INBOX"].LastUID != 5 {
		t.Errorf("cursor = %+v", st)
	}
	kinds, per := countKinds(conntest.Changes(t, pool, "mail"))
	if kinds["created"] != 5 || len(kinds) != 1 || len(per) != 5 {
		t.Fatalf("changes = %v over %d records, want 5 created", kinds, len(per))
	}
}

// When the server rebuilds a mailbox (new UIDVALIDITY, new UIDs), the
// mailbox is read again from the start; ids come from Message-ID (or a
// content hash), so the re-read writes nothing but the one new message.
func TestUIDValidityChangeResyncsWithoutDuplicates(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ts := newTestServer(t, modePlain)
	msgs := []string{
		mail("v1@x", "one", "first"),
		mail("v2@x", "two", "second"),
		mail("", "no message id", "a message without a Message-ID gets a content hash id"),
	}
	for _, m := range msgs {
		ts.appendMsg("INBOX", m)
	}
	var logs logBuffer
	c := connect(t, ts, func(o *imap.Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	r1 := conntest.Fetch(t, c, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	ids1 := r1.IDs()
	if !strings.HasPrefix(ids1[2], "INBOX sha256:") {
		t.Fatalf("id without Message-ID = %q", ids1[2])
	}
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r1)
	before := cursorOf(t, r1.Cursor(nil)).Mailboxes["INBOX"]

	// The mailbox is deleted and re-created: a new UIDVALIDITY; the same
	// messages come back in another order, plus one new.
	if err := ts.user.Delete("INBOX"); err != nil {
		t.Fatal(err)
	}
	if err := ts.user.Create("INBOX", nil); err != nil {
		t.Fatal(err)
	}
	ts.appendMsg("INBOX", msgs[2])
	ts.appendMsg("INBOX", mail("v4@x", "four", "new"))
	ts.appendMsg("INBOX", msgs[1])
	ts.appendMsg("INBOX", msgs[0])

	r2 := conntest.Fetch(t, c, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	after := cursorOf(t, r2.Cursor(r1.Cursor(nil))).Mailboxes["INBOX"]
	if after.UIDValidity == before.UIDValidity || after.LastUID != 4 {
		t.Fatalf("cursor before %+v after %+v: want a new UIDVALIDITY and last UID 4", before, after)
	}
	ids2 := r2.IDs()
	if len(ids2) != 4 || !slices.Contains(ids2, ids1[2]) || !slices.Contains(ids2, "INBOX <v4@x>") {
		t.Fatalf("re-read ids = %q; want the three known ids (same hash id) and v4", ids2)
	}
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r2)
	kinds, per := countKinds(conntest.Changes(t, pool, "mail"))
	if kinds["created"] != 4 || len(kinds) != 1 || len(per) != 4 {
		t.Fatalf("changes = %v over %d records; want 4 created and nothing else", kinds, len(per))
	}
	if !strings.Contains(logs.String(), "UIDVALIDITY changed") {
		t.Errorf("no warning about the UIDVALIDITY change in:\n%s", logs.String())
	}
}

// A message with only an HTML body gets its text extracted.
func TestHTMLOnlyMessage(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, modePlain)
	ts.appendMsg("INBOX", `Message-ID: <h1@x>
From: news@example.test
Subject: Weekly digest
MIME-Version: 1.0
Content-Type: text/html; charset=utf-8
Content-Transfer-Encoding: quoted-printable

<html><head><title>ignored</title><style>p {color: red}</style></head>
<body><h1>This week</h1><p>The build is <b>green</b> again.<br>Details
<a href=3D"https://ci.example.test/run/7">here</a>.</p>
<ul><li>one</li><li>two</li></ul><script>alert("x")</script></body></html>
`)
	r := conntest.Fetch(t, connect(t, ts, nil), nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	body, _ := r.Items()[0]["body"].(string)
	want := "This week\n\nThe build is green again.\nDetails here (https://ci.example.test/run/7).\n\n- one\n- two"
	if body != want {
		t.Fatalf("body = %q\nwant   %q", body, want)
	}
}

// A malformed part does not lose the message: the rest is kept, the item
// names the part that failed, and the run warns.
func TestMalformedMIMEPartKeepsTheMessage(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, modePlain)
	ts.appendMsg("INBOX", `Message-ID: <bad@x>
From: scanner@example.test
Subject: Scan
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="zz"

--zz
Content-Type: text/plain

The scan is attached.
--zz
Content-Type: application/pdf; name="scan.pdf"
Content-Disposition: attachment; filename="scan.pdf"
Content-Transfer-Encoding: base64

%%%% this is not base64 %%%%
--zz
Content-Type: text/plain; name="notes.txt"
Content-Disposition: attachment; filename="notes.txt"

notes
--zz--
`)
	ts.appendMsg("INBOX", mail("good@x", "fine", "fine"))
	var logs logBuffer
	c := connect(t, ts, func(o *imap.Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	r := conntest.Fetch(t, c, nil)
	if r.Err != nil {
		t.Fatalf("a malformed part failed the run: %v", r.Err)
	}
	items := r.Items()
	if len(items) != 2 {
		t.Fatalf("items = %d, want 2", len(items))
	}
	bad := items[0]
	if bad["body"] != "The scan is attached." {
		t.Errorf("body = %q", bad["body"])
	}
	if got, _ := json.Marshal(bad["attachments"]); string(got) != `["scan.pdf","notes.txt"]` {
		t.Errorf("attachments = %s", got)
	}
	errs, _ := bad["mime_errors"].([]any)
	if len(errs) != 1 || !strings.HasPrefix(errs[0].(string), `part 2 (application/pdf "scan.pdf"): illegal base64 data`) {
		t.Errorf("mime_errors = %q, want one naming part 2", errs)
	}
	if _, ok := items[1]["mime_errors"]; ok {
		t.Errorf("the good message has mime_errors: %v", items[1]["mime_errors"])
	}
	out := logs.String()
	if !strings.Contains(out, "messages_damaged=1") || !strings.Contains(out, `first_message="imap://127.0.0.1/INBOX;UID=1"`) {
		t.Errorf("the run does not say which message had a bad part:\n%s", out)
	}
}

// The server closes the connection in the middle of a FETCH: the run
// fails, the pages before it stay committed with their cursor, and the
// next run reads the rest — every message once, nothing lost.
func TestDroppedConnectionMidFetch(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ts := newTestServer(t, modePlain)
	for i := 1; i <= 7; i++ {
		ts.appendMsg("INBOX", mail(fmt.Sprintf("d%d@x", i), fmt.Sprintf("message %d", i), "text"))
	}
	ts.dropAfter.Store(3) // page 1 (2 messages) arrives, page 2 is cut after one message
	c := connect(t, ts, nil)
	r1 := conntest.Fetch(t, c, nil)
	if r1.Err == nil {
		t.Fatal("the run survived a dropped connection")
	}
	if errors.Is(r1.Err, connectors.ErrUnauthorized) || !strings.Contains(r1.Err.Error(), "fetch messages 3 to 4") {
		t.Errorf("error = %v", r1.Err)
	}
	if got := r1.IDs(); !slices.Equal(got, []string{"INBOX <d1@x>", "INBOX <d2@x>"}) {
		t.Fatalf("committed before the drop: %q", got)
	}
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r1)
	cur := r1.Cursor(nil)
	if st := cursorOf(t, cur); st.Mailboxes["INBOX"].LastUID != 2 {
		t.Fatalf("cursor after the drop = %s", cur)
	}

	r2 := conntest.Fetch(t, c, cur)
	if r2.Err != nil {
		t.Fatalf("next run: %v", r2.Err)
	}
	if got := r2.IDs(); len(got) != 5 || got[0] != "INBOX <d3@x>" {
		t.Fatalf("next run ids = %q, want d3..d7", got)
	}
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r2)
	kinds, per := countKinds(conntest.Changes(t, pool, "mail"))
	if kinds["created"] != 7 || len(kinds) != 1 || len(per) != 7 {
		t.Fatalf("changes = %v over %d records, want 7 created", kinds, len(per))
	}
}

// Mail is never marked read unless mark_seen is set; with it, each
// message is marked once its page is committed.
func TestSeenFlags(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, modePlain, "Other")
	for i := 1; i <= 3; i++ {
		ts.appendMsg("INBOX", mail(fmt.Sprintf("s%d@x", i), "unread", "text"))
		ts.appendMsg("Other", mail(fmt.Sprintf("o%d@x", i), "unread", "text"))
	}
	r := conntest.Fetch(t, connect(t, ts, nil), nil)
	if r.Err != nil || len(r.Items()) != 3 {
		t.Fatalf("fetch: %d items, %v", len(r.Items()), r.Err)
	}
	for uid, flags := range ts.flags("INBOX") {
		if slices.Contains(flags, goimap.FlagSeen) {
			t.Errorf("reading marked UID %d seen: %v", uid, flags)
		}
	}

	var committed []string
	c := connect(t, ts, func(o *imap.Options) { o.Mailboxes = []string{"Other"}; o.MarkSeen = true })
	_, err := c.Fetch(context.Background(), nil, func(_ context.Context, p connectors.Page) error {
		// The page is being committed: nothing of it is marked yet.
		seen := ts.flags("Other")
		for _, it := range p.Items {
			committed = append(committed, it.Value.(map[string]any)["id"].(string))
		}
		for uid, flags := range seen {
			if slices.Contains(flags, goimap.FlagSeen) && int(uid) > len(committed)-len(p.Items) {
				t.Errorf("UID %d marked seen before its page was committed", uid)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(committed) != 3 {
		t.Fatalf("committed %q", committed)
	}
	for uid, flags := range ts.flags("Other") {
		if !slices.Contains(flags, goimap.FlagSeen) {
			t.Errorf("mark_seen left UID %d unread: %v", uid, flags)
		}
	}
}

// Refused credentials are connectors.ErrUnauthorized (the syncer disables
// the source), for LOGIN/PLAIN and for XOAUTH2; a good token logs in.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, modePlain)
	ts.appendMsg("INBOX", mail("x@x", "hello", "text"))
	for _, tc := range []struct {
		name   string
		set    func(*imap.Options)
		denied bool
	}{
		{"wrong password", func(o *imap.Options) { o.Password = "wrong" }, true},
		{"unknown user", func(o *imap.Options) { o.Username = "nobody@example.test" }, true},
		{"xoauth2 bad token", func(o *imap.Options) { o.Password, o.OAuthToken = "", "expired" }, true},
		{"xoauth2", func(o *imap.Options) { o.Password, o.OAuthToken = "", testToken }, false},
		{"password", nil, false},
	} {
		r := conntest.Fetch(t, connect(t, ts, tc.set), nil)
		if tc.denied {
			if !errors.Is(r.Err, connectors.ErrUnauthorized) {
				t.Errorf("%s: err = %v, want ErrUnauthorized", tc.name, r.Err)
			}
			if r.Err != nil && strings.Contains(r.Err.Error(), testPassword) {
				t.Errorf("%s: the error shows the password: %v", tc.name, r.Err)
			}
			continue
		}
		if r.Err != nil || len(r.Items()) != 1 {
			t.Errorf("%s: %d items, err %v", tc.name, len(r.Items()), r.Err)
		}
	}
}

// TLS and STARTTLS with the test server's certificate trusted through
// ca_file, built from a source file; without the CA the handshake fails.
// plain to a server that is not on loopback is refused unless allowed.
func TestTLSModesFromConfig(t *testing.T) {
	t.Setenv("LOOKOUT_TEST_IMAP_PASSWORD", testPassword)
	for _, tc := range []struct {
		mode     serverMode
		security string
	}{{modeTLS, "tls"}, {modeSTARTTLS, "starttls"}} {
		ts := newTestServer(t, tc.mode)
		ts.appendMsg("INBOX", mail("t@x", "over "+tc.security, "text"))
		_, port, _ := strings.Cut(ts.addr, ":")
		build := func(caFile string) (connectors.Connector, error) {
			dir := conntest.WriteConfig(t, map[string]string{"sources/mail.yaml": fmt.Sprintf(`name: mail
connector: imap
imap:
  host: 127.0.0.1
  port: %s
  security: %s
  username: %s
  password: ${LOOKOUT_TEST_IMAP_PASSWORD}
%s`, port, tc.security, testUser, caFile)})
			if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ts.certPEM, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			return connectors.New(cfg.Sources[0], connectors.Env{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
		}
		conn, err := build("  ca_file: ca.pem\n")
		if err != nil {
			t.Fatal(err)
		}
		r := conntest.Fetch(t, conn, nil)
		if r.Err != nil || len(r.Items()) != 1 || r.Items()[0]["title"] != "over "+tc.security {
			t.Errorf("%s: items %v, err %v", tc.security, r.Items(), r.Err)
		}
		untrusted, err := build("")
		if err != nil {
			t.Fatal(err)
		}
		if r := conntest.Fetch(t, untrusted, nil); r.Err == nil || !strings.Contains(r.Err.Error(), "certificate") {
			t.Errorf("%s without the CA: err = %v, want a certificate error", tc.security, r.Err)
		}
	}
}

// The IMAP dial goes through the dialer the syncer passes (the egress
// policy): deny_private refuses the loopback server before connecting.
func TestDialThroughEgressPolicy(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, modePlain)
	c := connect(t, ts, func(o *imap.Options) { o.Dial = egress.Policy{DenyPrivate: true}.Dialer().DialContext })
	r := conntest.Fetch(t, c, nil)
	var de *egress.DeniedError
	if !errors.As(r.Err, &de) {
		t.Fatalf("err = %v, want an egress refusal", r.Err)
	}
}

// With idle set, a run waits in IDLE after reading and reads a message
// that arrives meanwhile within moments, as its own page.
func TestIdleSeesNewMail(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, modePlain)
	ts.appendMsg("INBOX", mail("before@x", "before", "text"))
	c := connect(t, ts, func(o *imap.Options) { o.Idle = time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pages := make(chan connectors.Page, 4)
	done := make(chan error, 1)
	go func() {
		_, err := c.Fetch(ctx, nil, func(_ context.Context, p connectors.Page) error {
			pages <- p
			return nil
		})
		done <- err
	}()
	p := testsignal.Receive(t, pages, "the first page")
	if len(p.Items) != 1 {
		t.Fatalf("first page: %d items", len(p.Items))
	}
	testsignal.Receive(t, ts.idling, "the run to enter IDLE")
	sent := time.Now()
	ts.appendMsg("INBOX", mail("during@x", "during", "text"))
	p = testsignal.Receive(t, pages, "the page of the message that arrived while idling")
	t.Logf("new message read %s after it arrived", time.Since(sent))
	if len(p.Items) != 1 || p.Items[0].Value.(map[string]any)["id"] != "INBOX <during@x>" {
		t.Fatalf("idle page = %+v", p.Items)
	}
	if st := cursorOf(t, p.Cursor); st.Mailboxes["INBOX"].LastUID != 2 {
		t.Errorf("idle page cursor = %s", p.Cursor)
	}
	cancel()
	if err := testsignal.Receive(t, done, "the run to end"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled idle run: %v", err)
	}
}

// An idle run with no new mail ends by itself at the bound, successfully.
func TestIdleEndsAtItsBound(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, modePlain)
	ts.appendMsg("INBOX", mail("only@x", "only", "text"))
	c := connect(t, ts, func(o *imap.Options) { o.Idle = 50 * time.Millisecond })
	r := conntest.Fetch(t, c, nil)
	if r.Err != nil || len(r.Items()) != 1 {
		t.Fatalf("idle run: %d items, err %v", len(r.Items()), r.Err)
	}
	if st := cursorOf(t, r.Result.Cursor); st.Mailboxes["INBOX"].LastUID != 1 {
		t.Errorf("cursor = %s", r.Result.Cursor)
	}
}

// A run stops at max_messages; the next run goes on from there.
func TestMaxMessagesBoundsARun(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, modePlain)
	for i := 1; i <= 5; i++ {
		ts.appendMsg("INBOX", mail(fmt.Sprintf("b%d@x", i), "m", "text"))
	}
	c := connect(t, ts, func(o *imap.Options) { o.MaxMessages = 3 })
	r1 := conntest.Fetch(t, c, nil)
	if r1.Err != nil || len(r1.Items()) != 3 {
		t.Fatalf("first run: %d items, %v", len(r1.Items()), r1.Err)
	}
	r2 := conntest.Fetch(t, c, r1.Cursor(nil))
	if got := r2.IDs(); r2.Err != nil || !slices.Equal(got, []string{"INBOX <b4@x>", "INBOX <b5@x>"}) {
		t.Fatalf("second run: %q, %v", got, r2.Err)
	}
}

// An access token in oauth_token_file (relative to the configuration
// directory) is read at every connection: after the operator's refresher
// rewrote the file, the next run logs in with the new token, with no
// restart and no new connector. A connector that kept the first token
// would be refused once the server stopped accepting it.
func TestOAuthTokenFileIsReadAtEachConnection(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, modePlain)
	ts.appendMsg("INBOX", mail("o@x", "token one", "text"))
	_, port, _ := strings.Cut(ts.addr, ":")
	dir := conntest.WriteConfig(t, map[string]string{"sources/mail.yaml": fmt.Sprintf(`name: mail
connector: imap
imap:
  host: 127.0.0.1
  port: %s
  security: plain
  username: %s
  oauth_token_file: secrets/imap-token
`, port, testUser)})
	tokenFile := filepath.Join(dir, "secrets", "imap-token")
	if err := os.MkdirAll(filepath.Dir(tokenFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connectors.New(cfg.Sources[0], connectors.Env{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	first := conntest.Fetch(t, conn, nil)
	if first.Err != nil || len(first.Items()) != 1 {
		t.Fatalf("first connection: %d items, err %v", len(first.Items()), first.Err)
	}

	// The token expires: the server takes only the refreshed one.
	const refreshed = "ya29.refreshed-token"
	ts.acceptToken(refreshed)
	// Refused, but not ErrUnauthorized (which disables the source until
	// its configuration changes): the next run reads the file again.
	if r := conntest.Fetch(t, conn, first.Cursor(nil)); r.Err == nil || errors.Is(r.Err, connectors.ErrUnauthorized) ||
		!strings.Contains(r.Err.Error(), "imap-token") {
		t.Fatalf("with the expired token still in the file: err = %v, want a failed run naming the file, not ErrUnauthorized", r.Err)
	}
	if err := os.WriteFile(tokenFile, []byte(refreshed), 0o600); err != nil {
		t.Fatal(err)
	}
	ts.appendMsg("INBOX", mail("o2@x", "token two", "text"))
	second := conntest.Fetch(t, conn, first.Cursor(nil))
	if second.Err != nil || len(second.Items()) != 1 || second.Items()[0]["title"] != "token two" {
		t.Fatalf("second connection after the refresh: items %v, err %v", second.Items(), second.Err)
	}

	if err := os.WriteFile(tokenFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := conntest.Fetch(t, conn, second.Cursor(first.Cursor(nil))); r.Err == nil || !strings.Contains(r.Err.Error(), "imap-token is empty") {
		t.Errorf("an empty token file: err = %v, want one naming the file", r.Err)
	}
}

// dupMailbox fills INBOX with messages whose Message-IDs or contents
// collide: three pairs sharing a Message-ID (one pair byte for byte the
// same message delivered twice, two pairs with different text or
// headers), two copies of one message without a Message-ID, two
// messages without one that differ only in a header the content id does
// not cover, and two plain messages. It returns the raw messages in the
// order appended.
func dupMailbox(ts *testServer) []string {
	same := mail("twice@x", "delivered twice", "one text")
	noID := mail("", "cron: backup done", "backup of /srv done")
	msgs := []string{
		mail("p1@x", "plain one", "first"),
		same,
		mail("reused@x", "draft", "version one"),
		noID,
		mail("reused@x", "draft", "version two"),
		"Received: from a.example.test\n" + mail("", "alert", "disk full"),
		same,
		"X-List: golang\n" + mail("list@x", "hello", "same text in both copies"),
		noID,
		"Received: from b.example.test\n" + mail("", "alert", "disk full"),
		mail("list@x", "hello", "same text in both copies"),
		mail("p2@x", "plain two", "second"),
	}
	for _, m := range msgs {
		ts.appendMsg("INBOX", m)
	}
	return msgs
}

// Every message is one record, whatever it shares with another: three
// pairs sharing a Message-ID and four messages without one (two of them
// copies of one message) make twelve records, read a page of two at a
// time, so that the messages of a pair are read in different pages.
func TestEveryMessageIsOneRecord(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ts := newTestServer(t, modePlain)
	msgs := dupMailbox(ts)
	c := connect(t, ts, nil)
	r := conntest.Fetch(t, c, nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r)
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM records WHERE source = 'mail'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(msgs) {
		t.Fatalf("%d records for %d messages; ids read: %q", n, len(msgs), r.IDs())
	}
	ids := r.IDs()
	for _, want := range []string{"INBOX <p1@x>", "INBOX <p2@x>", "INBOX <twice@x>", "INBOX <reused@x>", "INBOX <list@x>"} {
		if !slices.Contains(ids, want) {
			t.Errorf("no id %q in %q", want, ids)
		}
	}
	kinds, _ := countKinds(conntest.Changes(t, pool, "mail"))
	if kinds["created"] != len(msgs) {
		t.Errorf("changes = %v, want %d created", kinds, len(msgs))
	}
}

// After a UIDVALIDITY change the same messages, back in another order
// with new UIDs, keep their ids: the re-read writes no change at all.
func TestUIDValidityChangeWithCollidingMessagesWritesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ts := newTestServer(t, modePlain)
	msgs := dupMailbox(ts)
	c := connect(t, ts, nil)
	r1 := conntest.Fetch(t, c, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r1)
	before := len(conntest.Changes(t, pool, "mail"))

	if err := ts.user.Delete("INBOX"); err != nil {
		t.Fatal(err)
	}
	if err := ts.user.Create("INBOX", nil); err != nil {
		t.Fatal(err)
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		ts.appendMsg("INBOX", msgs[i])
	}
	r2 := conntest.Fetch(t, c, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	ids1, ids2 := slices.Sorted(slices.Values(r1.IDs())), slices.Sorted(slices.Values(r2.IDs()))
	ids1, ids2 = slices.Compact(ids1), slices.Compact(ids2)
	if !slices.Equal(ids1, ids2) {
		t.Errorf("ids before %q\nids after %q", ids1, ids2)
	}
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r2)
	all := conntest.Changes(t, pool, "mail")
	if len(all) != before {
		t.Fatalf("the re-read wrote %d changes, want none: %+v", len(all)-before, all[before:])
	}
}

// A message that arrives after another with its Message-ID (or, without
// one, its content) is a record of its own, and the earlier message keeps
// one: the records still hold both texts.
func TestLateDuplicateIsARecordOfItsOwn(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ts := newTestServer(t, modePlain)
	ts.appendMsg("INBOX", mail("reused@x", "draft", "version two"))
	ts.appendMsg("INBOX", "Received: from a.example.test\n"+mail("", "alert", "disk full"))
	c := connect(t, ts, nil)
	r1 := conntest.Fetch(t, c, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r1)
	ts.appendMsg("INBOX", mail("reused@x", "draft", "version one"))
	ts.appendMsg("INBOX", "Received: from b.example.test\n"+mail("", "alert", "disk full"))
	r2 := conntest.Fetch(t, c, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	conntest.Mirror(t, pool, "mail", normalize.FieldExprs{}, nil, r2)
	rows, err := pool.Query(context.Background(), `SELECT body FROM records WHERE source = 'mail' ORDER BY body`)
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"disk full", "disk full", "version one", "version two"}; !slices.Equal(bodies, want) {
		t.Fatalf("record bodies = %q, want %q", bodies, want)
	}
}
