package web

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/andybalholm/cascadia"
	"github.com/antchfx/htmlquery"
	"github.com/antchfx/xpath"
	"golang.org/x/net/html"
)

// XPathPrefix marks a selector written in XPath instead of CSS.
const XPathPrefix = "xpath:"

// Selector is a compiled CSS selector or XPath expression.
type Selector struct {
	src string
	css cascadia.Selector
	xp  *xpath.Expr
}

// CompileSelector compiles s: an XPath expression after the "xpath:"
// prefix, else a CSS selector (a group, "a, b", included).
func CompileSelector(s string) (*Selector, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("is empty")
	}
	if expr, ok := strings.CutPrefix(s, XPathPrefix); ok {
		xp, err := xpath.Compile(strings.TrimSpace(expr))
		if err != nil {
			return nil, fmt.Errorf("is not a valid XPath expression: %v", err)
		}
		return &Selector{src: s, xp: xp}, nil
	}
	css, err := cascadia.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("is not a valid CSS selector: %v", err)
	}
	return &Selector{src: s, css: css}, nil
}

// String returns the selector as written.
func (s *Selector) String() string { return s.src }

// All returns the nodes under root that s matches, in document order. An
// XPath expression that selects attributes gives one node per attribute
// (an element named like the attribute, holding its value as text, with
// no parent), as htmlquery does.
func (s *Selector) All(root *html.Node) []*html.Node {
	if s.xp != nil {
		return htmlquery.QuerySelectorAll(root, s.xp)
	}
	return s.css.MatchAll(root)
}

// Field says where a value is within an item (or the page): the text of
// what a selector matches, an attribute of it, or an attribute of the item
// itself.
type Field struct {
	// Sel selects the node; nil means the item itself.
	Sel *Selector
	// Attr is the attribute to read; "" reads the text.
	Attr string
}

var attrName = regexp.MustCompile(`^[A-Za-z_:][-A-Za-z0-9_:.]*$`)

// ParseField reads "selector", "@attr" or "selector@attr". An XPath
// field ("xpath:...") selects attributes itself ("xpath:.//a/@href").
func ParseField(s string) (Field, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Field{}, fmt.Errorf("is empty")
	}
	if strings.HasPrefix(s, XPathPrefix) {
		sel, err := CompileSelector(s)
		return Field{Sel: sel}, err
	}
	var attr string
	if i := strings.LastIndexByte(s, '@'); i >= 0 && attrName.MatchString(s[i+1:]) {
		s, attr = strings.TrimSpace(s[:i]), strings.ToLower(s[i+1:])
	}
	if s == "" {
		return Field{Attr: attr}, nil
	}
	sel, err := CompileSelector(s)
	if err != nil {
		return Field{}, err
	}
	return Field{Sel: sel, Attr: attr}, nil
}

// linkAttrs are the attributes whose values are URLs, resolved against
// the page's base URL.
var linkAttrs = map[string]bool{"href": true, "src": true, "action": true, "poster": true, "cite": true, "data-href": true, "data-url": true}
