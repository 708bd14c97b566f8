package imap

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/charset" // charsets beyond UTF-8 and US-ASCII
	"github.com/emersion/go-message/mail"
)

// Limits on what is read of one message.
const (
	// MaxTextBytes bounds the text kept of one message's body; the rest is
	// cut.
	MaxTextBytes = 1 << 20
	// maxDepth bounds the nesting of multiparts that is walked.
	maxDepth = 20
)

// Message is what the connector reads from one e-mail.
type Message struct {
	// MessageID is the Message-ID header without its angle brackets, or "".
	MessageID string
	// From, To and Cc are the addresses, "Name <addr>" or "addr".
	From, To, Cc []string
	// Subject is the decoded Subject header.
	Subject string
	// Date is the Date header, zero when absent or unreadable.
	Date time.Time
	// Text is the body as text: the text/plain parts, else the text/html
	// parts converted to text.
	Text string
	// Attachments are the names of the parts that are not body text.
	Attachments []string
	// Problems name each part or header that could not be read
	// (`part 2 (application/pdf "a.pdf"): illegal base64 data at input
	// byte 4`); what could be read is kept.
	Problems []string
	// hasMessageID is set when the message has a Message-ID header, even
	// an empty one.
	hasMessageID bool
}

// Parse reads a whole RFC 5322 message with go-message. It never fails:
// whatever cannot be read is named in Problems and the rest is kept.
func Parse(raw []byte) *Message {
	m := &Message{}
	e, err := message.Read(bytes.NewReader(raw))
	if err != nil && e == nil {
		m.problem("header", err)
		return m
	}
	if err != nil {
		m.problem("part 1", err) // unknown charset or encoding of a single-part body
	}
	h := mail.Header{Header: e.Header}
	m.headers(h)
	p := &bodyParser{m: m, budget: MaxTextBytes}
	p.walk(e, nil, 0)
	text := strings.TrimSpace(strings.Join(p.plain, "\n\n"))
	if text == "" && len(p.html) > 0 {
		text = strings.TrimSpace(strings.Join(p.html, "\n\n"))
	}
	m.Text = text
	return m
}

func (m *Message) problem(where string, err error) {
	m.Problems = append(m.Problems, where+": "+strings.TrimSpace(err.Error()))
}

func (m *Message) headers(h mail.Header) {
	m.hasMessageID = h.Has("Message-Id")
	if id, err := h.MessageID(); err == nil {
		m.MessageID = id
	} else {
		// Not a well-formed msg-id: the raw value is still a stable id.
		m.MessageID = strings.Trim(strings.TrimSpace(h.Get("Message-Id")), "<>")
	}
	m.From = m.addresses(h, "From")
	m.To = m.addresses(h, "To")
	m.Cc = m.addresses(h, "Cc")
	subject, err := h.Subject()
	if err != nil {
		m.problem("header Subject", err)
	}
	m.Subject = strings.TrimSpace(subject)
	if h.Get("Date") != "" {
		d, err := h.Date()
		if err != nil {
			m.problem("header Date", err)
		} else {
			m.Date = d
		}
	}
}

// addresses reads an address list; one that does not parse is kept as its
// decoded text, and named in Problems.
func (m *Message) addresses(h mail.Header, key string) []string {
	if h.Get(key) == "" {
		return nil
	}
	list, err := h.AddressList(key)
	if err != nil {
		m.problem("header "+key, err)
		text, _ := h.Text(key)
		if text = strings.TrimSpace(text); text != "" {
			return []string{text}
		}
		return nil
	}
	out := make([]string, 0, len(list))
	for _, a := range list {
		if a.Name != "" {
			out = append(out, a.Name+" <"+a.Address+">")
		} else {
			out = append(out, a.Address)
		}
	}
	return out
}

// bodyParser walks the MIME tree of one message.
type bodyParser struct {
	m      *Message
	plain  []string
	html   []string
	budget int // text bytes still kept
	// cut is set when a part ended before its boundary: the message is
	// truncated, and the multiparts around it have nothing more to say.
	cut bool
}

// readErr notes err reading the part labelled label.
func (p *bodyParser) readErr(label string, err error) {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		p.cut = true
		err = fmt.Errorf("the message ends inside this part (%w)", err)
	}
	p.m.problem(label, err)
}

// partName is the IMAP part number of path ("1" for a single-part body).
func partName(path []int) string {
	if len(path) == 0 {
		return "1"
	}
	s := make([]string, len(path))
	for i, n := range path {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ".")
}

func (p *bodyParser) walk(e *message.Entity, path []int, depth int) {
	mediaType, params, ctErr := e.Header.ContentType()
	if ctErr != nil {
		mediaType = "text/plain" // RFC 2045 5.2: an unreadable Content-Type is the default
	}
	label := func() string {
		l := "part " + partName(path) + " (" + mediaType
		if name := filename(e, params); name != "" {
			l += " " + strconv.Quote(name)
		}
		return l + ")"
	}
	if ctErr != nil {
		p.m.problem(label()+" Content-Type", ctErr)
	}
	if mr := e.MultipartReader(); mr != nil {
		if depth >= maxDepth {
			p.m.problem(label(), fmt.Errorf("multipart nested deeper than %d; not read", maxDepth))
			return
		}
		for i := 1; ; i++ {
			part, err := mr.NextPart()
			if err == io.EOF {
				return
			}
			child := append(append([]int(nil), path...), i)
			if err != nil && part == nil {
				if !p.cut {
					p.m.problem("part "+partName(child), err)
				}
				return
			}
			if err != nil { // unknown charset or transfer encoding: read it as it is
				p.m.problem("part "+partName(child), err)
			}
			p.walk(part, child, depth+1)
		}
	}
	disp, _, _ := e.Header.ContentDisposition()
	name := filename(e, params)
	isText := mediaType == "text/plain" || mediaType == "text/html"
	if !isText || disp == "attachment" || (name != "" && disp != "inline") {
		if name == "" {
			name = "(unnamed " + mediaType + ")"
		}
		p.m.Attachments = append(p.m.Attachments, name)
		if _, err := io.Copy(io.Discard, e.Body); err != nil {
			p.readErr(label(), err)
		}
		return
	}
	body, err := io.ReadAll(io.LimitReader(e.Body, int64(p.budget)))
	if err == nil {
		_, err = io.Copy(io.Discard, e.Body) // the part past the budget, for its errors
	}
	if err != nil {
		p.readErr(label(), err)
	}
	p.budget -= len(body)
	if len(body) == 0 {
		return
	}
	if mediaType == "text/html" {
		text, herr := HTMLText(bytes.NewReader(body))
		if herr != nil {
			p.m.problem(label(), herr)
			return
		}
		p.html = append(p.html, text)
		return
	}
	p.plain = append(p.plain, string(body))
}

// filename is the part's file name: Content-Disposition's filename, else
// Content-Type's name. RFC 2047 encoded words in them are decoded by
// go-message; RFC 2231 values in a charset other than UTF-8
// (filename*=gb2312”%B9%DC...), which mime.ParseMediaType leaves out,
// by extendedParam, whose value comes first (ParseMediaType keeps only
// the parts of a continued value it can decode).
func filename(e *message.Entity, ctParams map[string]string) string {
	_, dp, _ := e.Header.ContentDisposition()
	for _, n := range []string{
		extendedParam(e.Header.Get("Content-Disposition"), "filename"), dp["filename"],
		extendedParam(e.Header.Get("Content-Type"), "name"), ctParams["name"],
	} {
		if n = strings.TrimSpace(n); n != "" {
			return n
		}
	}
	return ""
}

// extendedParam decodes the RFC 2231 parameter key of a header value
// (key*=charset'lang'%XX..., or continued as key*0*=, key*1*=, key*2=...)
// in any charset the charset package knows; "" when there is none or it
// cannot be decoded.
func extendedParam(header, key string) string {
	parts := map[int]string{}
	encoded := map[int]bool{}
	for _, p := range splitParams(header) {
		name, value, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		name = strings.ToLower(strings.TrimSpace(name))
		rest, ok := strings.CutPrefix(name, key+"*")
		if !ok {
			continue
		}
		n, enc := 0, false
		switch {
		case rest == "":
			enc = true
		default:
			rest, enc = strings.CutSuffix(rest, "*")
			var err error
			if n, err = strconv.Atoi(rest); err != nil || n < 0 || n > 100 {
				continue
			}
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		parts[n], encoded[n] = value, enc
	}
	first, ok := parts[0]
	if !ok || !encoded[0] {
		return ""
	}
	cs, rest, ok := strings.Cut(first, "'")
	if !ok {
		return ""
	}
	if _, v, ok := strings.Cut(rest, "'"); ok { // the language
		parts[0] = v
	} else {
		return ""
	}
	var raw []byte
	for i := 0; ; i++ {
		v, ok := parts[i]
		if !ok {
			break
		}
		if !encoded[i] {
			raw = append(raw, v...)
			continue
		}
		u, err := url.PathUnescape(v)
		if err != nil {
			return ""
		}
		raw = append(raw, u...)
	}
	cs = strings.ToLower(cs)
	if cs == "" || cs == "utf-8" || cs == "us-ascii" {
		return strings.TrimSpace(strings.ToValidUTF8(string(raw), "\uFFFD"))
	}
	r, err := charset.Reader(cs, bytes.NewReader(raw))
	if err != nil {
		return ""
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
}

// splitParams splits a header value at the semicolons outside quoted
// strings; the first element is the value itself.
func splitParams(s string) []string {
	var out []string
	var b strings.Builder
	quoted, escaped := false, false
	for _, r := range s {
		switch {
		case escaped:
			escaped = false
		case quoted && r == '\\':
			escaped = true
		case r == '"':
			quoted = !quoted
		case r == ';' && !quoted:
			out = append(out, b.String())
			b.Reset()
			continue
		}
		b.WriteRune(r)
	}
	return append(out, b.String())
}
