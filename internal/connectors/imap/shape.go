package imap

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/normalize"
)

// Shape turns one message of mailbox into the item the connector emits:
//
//	message_id   the Message-ID, without angle brackets
//	mailbox      the mailbox name
//	title        the subject
//	author       the first From address
//	from, to, cc address lists ("Name <addr>")
//	body         the text (text/plain parts, else text/html as text)
//	created_at   the Date header, else the server's INTERNALDATE
//	attachments  names of the parts that are not body text
//	flags        the IMAP flags and keywords when read, sorted (\Recent left out)
//	mime_errors  present when a part or header could not be read: which, and why
//
// Absent values are left out. The id is not set here: it depends on the
// other messages of the mailbox that share the message's Message-ID or
// content (see assignIDs), and holds no UID, so it survives a UIDVALIDITY
// change.
func Shape(mailbox string, m *Message, flags []string, internal time.Time) map[string]any {
	out := map[string]any{"mailbox": mailbox}
	set := func(k, v string) {
		if v = strings.TrimSpace(v); v != "" {
			out[k] = v
		}
	}
	list := func(k string, vs []string) {
		if len(vs) > 0 {
			out[k] = anyList(vs)
		}
	}
	set("message_id", m.MessageID)
	set("title", m.Subject)
	if len(m.From) > 0 {
		set("author", m.From[0])
	}
	list("from", m.From)
	list("to", m.To)
	list("cc", m.Cc)
	set("body", m.Text)
	switch {
	case !m.Date.IsZero():
		out["created_at"] = m.Date.UTC().Format(time.RFC3339)
	case !internal.IsZero():
		out["created_at"] = internal.UTC().Format(time.RFC3339)
	}
	list("attachments", m.Attachments)
	fl := make([]string, 0, len(flags))
	for _, f := range flags {
		if !strings.EqualFold(f, `\Recent`) {
			fl = append(fl, f)
		}
	}
	slices.Sort(fl)
	out["flags"] = anyList(fl)
	list("mime_errors", m.Problems)
	return out
}

func anyList(vs []string) []any {
	l := make([]any, len(vs))
	for i, v := range vs {
		l[i] = v
	}
	return l
}

// contentID identifies a message by what it says (date, addresses,
// subject, text and attachment names), so that it gets the same id on
// every read, whatever its UID.
func contentID(m *Message) string {
	date := ""
	if !m.Date.IsZero() {
		date = m.Date.UTC().Format(time.RFC3339)
	}
	sum := sha256.Sum256(normalize.Canonical(map[string]any{
		"date": date, "from": anyList(m.From), "to": anyList(m.To), "cc": anyList(m.Cc),
		"subject": m.Subject, "text": m.Text, "attachments": anyList(m.Attachments),
	}))
	return "sha256:" + hex.EncodeToString(sum[:16])
}
