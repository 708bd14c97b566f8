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

// Attachment names in charsets other than UTF-8 are decoded, whether
// RFC 2231 (filename*=gb2312”..., continuations filename*0*=...) or
// RFC 2047 encoded words in the parameter (name="=?ISO-2022-JP?B?...?="),
// as Outlook and Japanese and Chinese mailers send them.
func TestParseAttachmentNamesInOtherCharsets(t *testing.T) {
	t.Parallel()
	m := imap.Parse(crlf(`Message-ID: <names@x>
Subject: names
Content-Type: multipart/mixed; boundary=b

--b
Content-Type: text/plain; charset=utf-8

see attached
--b
Content-Type: application/msword
Content-Disposition: attachment; filename*=gb2312''%B9%DC%C0%ED.doc

x
--b
Content-Type: application/pdf; name="=?ISO-2022-JP?B?GyRCSnM5cD1xGyhCLnBkZg==?="
Content-Disposition: attachment

x
--b
Content-Type: text/plain; charset=iso-2022-jp
Content-Disposition: attachment;
 filename*0*=iso-2022-jp'ja'%1B%24B5D%3BvO%3F%1B%28B;
 filename*1=".txt"

x
--b
Content-Type: application/msword; name="=?GB2312?B?udzA7S5kb2M=?="

x
--b--
`))
	want := []string{"管理.doc", "報告書.pdf", "議事録.txt", "管理.doc"}
	if strings.Join(m.Attachments, "|") != strings.Join(want, "|") || len(m.Problems) != 0 {
		t.Errorf("attachments %q, want %q; problems %q", m.Attachments, want, m.Problems)
	}
}
