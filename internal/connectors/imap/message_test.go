package imap_test

import (
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/connectors/imap"
)

func crlf(s string) []byte { return []byte(strings.ReplaceAll(s, "\n", "\r\n")) }

func TestParseMultipartAlternativePrefersPlainText(t *testing.T) {
	t.Parallel()
	m := imap.Parse(crlf(`Message-ID: <alt@x>
From: =?utf-8?b?SsO8cmdlbg==?= <j@example.test>
Subject: alt
Content-Type: multipart/alternative; boundary=b

--b
Content-Type: text/plain; charset=utf-8

plain version
--b
Content-Type: text/html; charset=utf-8

<p>html version</p>
--b--
`))
	if m.Text != "plain version" || len(m.Problems) != 0 {
		t.Fatalf("text %q problems %q", m.Text, m.Problems)
	}
	if len(m.From) != 1 || m.From[0] != "Jürgen <j@example.test>" {
		t.Errorf("from = %q", m.From)
	}
}

func TestParseUnclosedMultipartKeepsWhatWasRead(t *testing.T) {
	t.Parallel()
	m := imap.Parse(crlf(`Message-ID: <cut@x>
Subject: cut
Content-Type: multipart/mixed; boundary=b

--b
Content-Type: text/plain

first part
--b
Content-Type: image/png; name="a.png"
Content-Transfer-Encoding: base64

iVBORw0KGgo=
`))
	if m.Text != "first part" {
		t.Errorf("text = %q", m.Text)
	}
	if len(m.Problems) != 1 || m.Problems[0] != `part 2 (image/png "a.png"): the message ends inside this part (unexpected EOF)` {
		t.Errorf("problems = %q, want one naming part 2, cut short", m.Problems)
	}
	if len(m.Attachments) != 1 || m.Attachments[0] != "a.png" {
		t.Errorf("attachments = %q", m.Attachments)
	}
}

func TestParseBadHeaders(t *testing.T) {
	t.Parallel()
	m := imap.Parse(crlf(`Message-ID: not-bracketed
From: <<<broken
Date: yesterday-ish
Subject: still here

body
`))
	if m.MessageID != "not-bracketed" || m.Subject != "still here" || m.Text != "body" {
		t.Errorf("message = %+v", m)
	}
	if !m.Date.IsZero() || len(m.From) != 1 || m.From[0] != "<<<broken" {
		t.Errorf("date %v from %q", m.Date, m.From)
	}
	if len(m.Problems) != 2 || !strings.HasPrefix(m.Problems[0], "header From: ") || !strings.HasPrefix(m.Problems[1], "header Date: ") {
		t.Errorf("problems = %q", m.Problems)
	}
}

func TestHTMLText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"<p>a</p><p>b</p>", "a\n\nb"},
		{"a<br>b<br><br>c", "a\nb\n\nc"},
		{"<div>  lots   of\n space </div>", "lots of space"},
		{"<pre>  keep\n    this</pre>", "  keep\n    this"},
		{`<a href="https://x.test/">https://x.test/</a>`, "https://x.test/"},
		{`<a href="mailto:a@x">write</a>`, "write"},
		{`<img alt="logo"> text`, "logo text"},
		{"<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>", "a b\nc"},
		{"<p>unclosed <b>bold", "unclosed bold"},
		{"caf&eacute; &amp; &lt;tags&gt;", "café & <tags>"},
	} {
		got, err := imap.HTMLText(strings.NewReader(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("HTMLText(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
