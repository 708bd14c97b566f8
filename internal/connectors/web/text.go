package web

import (
	"regexp"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/text/unicode/norm"
)

// skipped are elements whose content is never readable text.
var skipped = map[atom.Atom]bool{
	atom.Head: true, atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Svg: true, atom.Iframe: true, atom.Object: true, atom.Canvas: true, atom.Select: true,
}

// blocks are elements that start and end a line of text.
var blocks = map[atom.Atom]bool{
	atom.Address: true, atom.Article: true, atom.Aside: true, atom.Blockquote: true, atom.Body: true,
	atom.Caption: true, atom.Dd: true, atom.Details: true, atom.Dialog: true, atom.Div: true, atom.Dl: true,
	atom.Dt: true, atom.Fieldset: true, atom.Figcaption: true, atom.Figure: true, atom.Footer: true,
	atom.Form: true, atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true,
	atom.Header: true, atom.Hr: true, atom.Li: true, atom.Main: true, atom.Nav: true, atom.Ol: true,
	atom.P: true, atom.Pre: true, atom.Section: true, atom.Summary: true, atom.Table: true, atom.Tbody: true,
	atom.Thead: true, atom.Tfoot: true, atom.Tr: true, atom.Ul: true, atom.Legend: true, atom.Option: true,
}

// Normalizer turns extracted text into what records hold: ignored parts
// removed, white space collapsed to single spaces, Unicode NFC.
type Normalizer struct {
	// Ignore are removed from the text, every match.
	Ignore []*regexp.Regexp
}

// Line normalizes one line of text.
func (z *Normalizer) Line(s string) string {
	s = norm.NFC.String(s)
	for _, re := range z.Ignore {
		s = re.ReplaceAllString(s, "")
	}
	return strings.Join(strings.Fields(s), " ")
}

// Lines normalizes every line and drops the empty ones.
func (z *Normalizer) Lines(in []string) []string {
	out := in[:0]
	for _, l := range in {
		if l = z.Line(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// Text returns the readable text of n as lines: block elements and <br>
// break lines, table cells are separated by a space, scripts, styles and
// other non-text elements are left out. Lines are not normalized.
func Text(n *html.Node) []string {
	var lines []string
	var cur strings.Builder
	flush := func() {
		if strings.TrimSpace(cur.String()) != "" {
			lines = append(lines, cur.String())
		}
		cur.Reset()
	}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		switch n.Type {
		case html.TextNode:
			cur.WriteString(n.Data)
			return
		case html.CommentNode, html.DoctypeNode:
			return
		case html.ElementNode:
			if skipped[n.DataAtom] {
				return
			}
			switch n.DataAtom {
			case atom.Br:
				flush()
				return
			case atom.Td, atom.Th:
				cur.WriteByte(' ')
			case atom.Img:
				if alt := attr(n, "alt"); alt != "" {
					cur.WriteString(" " + alt + " ")
				}
			}
		}
		block := n.Type == html.ElementNode && blocks[n.DataAtom]
		if block {
			flush()
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
		if block {
			flush()
		}
	}
	walk(n)
	flush()
	return lines
}

// attr returns the value of n's attribute name ("" when absent).
func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && strings.EqualFold(a.Key, name) {
			return a.Val
		}
	}
	return ""
}

// hasAttr reports whether n has the attribute name.
func hasAttr(n *html.Node, name string) bool {
	for _, a := range n.Attr {
		if a.Namespace == "" && strings.EqualFold(a.Key, name) {
			return true
		}
	}
	return false
}

// title returns the text of the document's first <title>.
func title(doc *html.Node) string {
	var found *html.Node
	var walk func(*html.Node) bool
	walk = func(n *html.Node) bool {
		if n.Type == html.ElementNode && n.DataAtom == atom.Title {
			found = n
			return true
		}
		if n.Type == html.ElementNode && (n.DataAtom == atom.Svg || n.DataAtom == atom.Body) {
			return false
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if walk(c) {
				return true
			}
		}
		return false
	}
	walk(doc)
	if found == nil {
		return ""
	}
	var b strings.Builder
	for c := found.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return b.String()
}
