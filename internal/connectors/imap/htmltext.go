package imap

import (
	"io"
	"strings"
	"unicode"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// HTMLText turns an HTML body into plain text by walking the tree that
// golang.org/x/net/html parses (the HTML5 algorithm, so broken markup reads
// the way a browser would): scripts, styles and the head are dropped,
// block elements and <br> break lines, list items start with "- ", a link
// whose target differs from its text is followed by the target in
// parentheses, an image shows its alt text, white space is collapsed
// except inside <pre>, and blank lines are kept to one.
func HTMLText(r io.Reader) (string, error) {
	doc, err := html.Parse(r)
	if err != nil {
		return "", err
	}
	w := &textWriter{}
	w.walk(doc)
	return w.String(), nil
}

// textWriter accumulates text with at most one pending line break kind.
type textWriter struct {
	b     strings.Builder
	pre   int  // depth inside <pre>
	space bool // a space is pending before the next word
	nl    int  // line breaks pending (0, 1 or 2)
}

// skipped elements contribute no text.
var skipped = map[atom.Atom]bool{
	atom.Head: true, atom.Script: true, atom.Style: true, atom.Template: true,
	atom.Noscript: true, atom.Title: true, atom.Iframe: true, atom.Object: true,
}

// blocks break the line before and after them; paragraphs-like ones leave
// a blank line.
var blocks = map[atom.Atom]int{
	atom.P: 2, atom.Div: 1, atom.Blockquote: 2, atom.Pre: 2, atom.Table: 2,
	atom.Tr: 1, atom.Ul: 2, atom.Ol: 2, atom.Li: 1, atom.Dl: 2, atom.Dt: 1, atom.Dd: 1,
	atom.H1: 2, atom.H2: 2, atom.H3: 2, atom.H4: 2, atom.H5: 2, atom.H6: 2,
	atom.Section: 1, atom.Article: 1, atom.Header: 1, atom.Footer: 1, atom.Nav: 1,
	atom.Aside: 1, atom.Main: 1, atom.Form: 1, atom.Fieldset: 1, atom.Figure: 1,
	atom.Address: 1, atom.Center: 1, atom.Caption: 1, atom.Hr: 2,
}

func (w *textWriter) walk(n *html.Node) {
	switch n.Type {
	case html.TextNode:
		w.text(n.Data)
		return
	case html.ElementNode:
		if skipped[n.DataAtom] {
			return
		}
		switch n.DataAtom {
		case atom.Br:
			if w.b.Len() > 0 {
				w.nl = min(w.nl+1, 2) // two <br> make a blank line
			}
			w.space = false
			return
		case atom.Img:
			if alt := strings.TrimSpace(attr(n, "alt")); alt != "" {
				w.text(alt)
			}
			return
		case atom.Td, atom.Th:
			w.space = true
		}
	}
	brk := 0
	if n.Type == html.ElementNode {
		brk = blocks[n.DataAtom]
	}
	if brk > 0 {
		w.breakLine(brk)
	}
	if n.DataAtom == atom.Li && n.Type == html.ElementNode {
		w.word("- ")
		w.space = false
	}
	if n.DataAtom == atom.Pre {
		w.pre++
	}
	start := w.b.Len()
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.walk(c)
	}
	if n.DataAtom == atom.Pre {
		w.pre--
	}
	if n.Type == html.ElementNode && n.DataAtom == atom.A {
		w.link(attr(n, "href"), w.b.String()[start:])
	}
	if brk > 0 {
		w.breakLine(brk)
	}
}

// link appends the target of a link when it is a web or mail address that
// the link's text does not already show.
func (w *textWriter) link(href, text string) {
	href = strings.TrimSpace(href)
	lower := strings.ToLower(href)
	if !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") {
		return
	}
	if strings.Contains(text, href) {
		return
	}
	if strings.TrimSpace(text) == "" {
		w.text(href)
		return
	}
	w.space = true
	w.text("(" + href + ")")
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val
		}
	}
	return ""
}

// text writes s, collapsing white space outside <pre>.
func (w *textWriter) text(s string) {
	if w.pre > 0 {
		for i, line := range strings.Split(s, "\n") {
			if i > 0 {
				w.breakLine(1)
			}
			if line != "" {
				w.word(line)
			}
		}
		return
	}
	if s != "" && unicode.IsSpace(rune(s[0])) {
		w.space = true
	}
	fields := strings.Fields(s)
	for i, f := range fields {
		if i > 0 {
			w.space = true
		}
		w.word(f)
	}
	if len(fields) > 0 && unicode.IsSpace(rune(s[len(s)-1])) {
		w.space = true
	}
}

// word writes s after the pending break or space.
func (w *textWriter) word(s string) {
	switch {
	case w.b.Len() == 0:
	case w.nl > 0:
		w.b.WriteString(strings.Repeat("\n", w.nl))
	case w.space:
		w.b.WriteByte(' ')
	}
	w.nl, w.space = 0, false
	w.b.WriteString(s)
}

// breakLine asks for n line breaks (2: a blank line) before the next word.
func (w *textWriter) breakLine(n int) {
	if w.b.Len() > 0 {
		w.nl = max(w.nl, n)
	}
	w.space = false
}

func (w *textWriter) String() string { return w.b.String() }
