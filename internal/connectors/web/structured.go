package web

import (
	"encoding/json"
	"strconv"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Offer is what a page says about a product's price in its structured
// data (JSON-LD or microdata, schema.org Product / Offer).
type Offer struct {
	// Price is the price as a number; nil when absent or not a number.
	Price *float64
	// Currency is the ISO 4217 code (priceCurrency).
	Currency string
	// Availability is the schema.org ItemAvailability name (InStock,
	// OutOfStock, ...), without the https://schema.org/ prefix.
	Availability string
}

// set copies o's values into item under price, currency and
// availability, leaving keys item already has.
func (o Offer) set(item map[string]any) {
	if _, ok := item["price"]; !ok && o.Price != nil {
		item["price"] = *o.Price
	}
	if _, ok := item["currency"]; !ok && o.Currency != "" {
		item["currency"] = o.Currency
	}
	if _, ok := item["availability"]; !ok && o.Availability != "" {
		item["availability"] = o.Availability
	}
}

func (o Offer) empty() bool { return o.Price == nil && o.Currency == "" && o.Availability == "" }

// fill sets o's missing values from other.
func (o *Offer) fill(other Offer) {
	if o.Price == nil {
		o.Price = other.Price
	}
	if o.Currency == "" {
		o.Currency = other.Currency
	}
	if o.Availability == "" {
		o.Availability = other.Availability
	}
}

// StructuredOffer reads the first Product or Offer of the page's JSON-LD
// scripts (objects, arrays and @graph), then fills what is missing from
// microdata (itemprop price, priceCurrency, availability) under root.
func StructuredOffer(doc, root *html.Node) Offer {
	var o Offer
	if doc != nil {
		for _, s := range findAll(doc, func(n *html.Node) bool {
			return n.DataAtom == atom.Script && strings.EqualFold(strings.TrimSpace(attr(n, "type")), "application/ld+json")
		}) {
			var v any
			if s.FirstChild == nil || json.Unmarshal([]byte(s.FirstChild.Data), &v) != nil {
				continue // a broken script is not the page's fault to fail on
			}
			if found, ok := ldOffer(v, 0); ok {
				o = found
				break
			}
		}
	}
	o.fill(microdataOffer(root))
	return o
}

// ldOffer finds a Product (its offers) or an Offer in a JSON-LD value.
func ldOffer(v any, depth int) (Offer, bool) {
	if depth > 8 {
		return Offer{}, false
	}
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			if o, ok := ldOffer(e, depth+1); ok {
				return o, true
			}
		}
	case map[string]any:
		switch {
		case hasType(v, "Product", "ProductGroup"):
			if o, ok := ldOffer(v["offers"], depth+1); ok {
				return o, true
			}
		case hasType(v, "Offer", "AggregateOffer"):
			o := Offer{Price: number(v["price"]), Currency: str(v["priceCurrency"]), Availability: Availability(str(v["availability"]))}
			if o.Price == nil {
				o.Price = number(v["lowPrice"])
			}
			if o.Price == nil {
				if spec, ok := v["priceSpecification"].(map[string]any); ok {
					o.Price = number(spec["price"])
					if o.Currency == "" {
						o.Currency = str(spec["priceCurrency"])
					}
				}
			}
			if !o.empty() {
				return o, true
			}
		}
		if g, ok := v["@graph"]; ok {
			return ldOffer(g, depth+1)
		}
	}
	return Offer{}, false
}

// hasType reports whether a JSON-LD object's @type is (or lists) one of names.
func hasType(v map[string]any, names ...string) bool {
	match := func(t any) bool {
		s, ok := t.(string)
		if !ok {
			return false
		}
		s = s[strings.LastIndexAny(s, "/:")+1:]
		for _, n := range names {
			if strings.EqualFold(s, n) {
				return true
			}
		}
		return false
	}
	switch t := v["@type"].(type) {
	case []any:
		for _, e := range t {
			if match(e) {
				return true
			}
		}
		return false
	default:
		return match(t)
	}
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return strings.TrimSpace(v)
	case map[string]any: // {"@id": "https://schema.org/InStock"}
		return str(v["@id"])
	}
	return ""
}

func number(v any) *float64 {
	switch v := v.(type) {
	case float64:
		return &v
	case string:
		if f, ok := ParsePrice(v); ok {
			return &f
		}
	}
	return nil
}

// microdataOffer reads itemprop price, priceCurrency and availability
// under root: the content attribute, else href (a <link>), else the text.
func microdataOffer(root *html.Node) Offer {
	var o Offer
	for _, n := range findAll(root, func(n *html.Node) bool { return hasAttr(n, "itemprop") }) {
		val := func() string {
			switch {
			case hasAttr(n, "content"):
				return strings.TrimSpace(attr(n, "content"))
			case hasAttr(n, "href"):
				return strings.TrimSpace(attr(n, "href"))
			}
			return strings.Join(strings.Fields(strings.Join(Text(n), " ")), " ")
		}
		for _, p := range strings.Fields(attr(n, "itemprop")) {
			switch p {
			case "price", "lowPrice":
				if o.Price == nil {
					o.Price = number(val())
				}
			case "priceCurrency":
				if o.Currency == "" {
					o.Currency = val()
				}
			case "availability":
				if o.Availability == "" {
					o.Availability = Availability(val())
				}
			}
		}
	}
	return o
}

// findAll returns the elements under root (root included) for which
// match is true, in document order.
func findAll(root *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	if root != nil {
		walk(root)
	}
	return out
}

// availabilities are schema.org's ItemAvailability values.
var availabilities = []string{
	"BackOrder", "Discontinued", "InStock", "InStoreOnly", "LimitedAvailability", "MadeToOrder",
	"OnlineOnly", "OutOfStock", "PreOrder", "PreSale", "Reserved", "SoldOut",
}

// Availability normalizes a schema.org availability ("https://schema.org/InStock",
// "http://schema.org/InStock", "instock", "In stock") to its enum name
// (InStock). A value that is none of them is returned trimmed.
func Availability(s string) string {
	s = strings.TrimSpace(s)
	last := s[strings.LastIndexAny(s, "/:")+1:]
	key := strings.ReplaceAll(strings.ReplaceAll(last, " ", ""), "_", "")
	for _, a := range availabilities {
		if strings.EqualFold(key, a) {
			return a
		}
	}
	return s
}

// ParsePrice reads a price written for people: "19.99", "$1,299.00",
// "1.299,00 €", "12,50", "EUR 7". The separator that comes last is the
// decimal one when one or two digits follow it.
func ParsePrice(s string) (float64, bool) {
	var b strings.Builder
	for _, r := range s {
		if (r >= '0' && r <= '9') || r == '.' || r == ',' || r == '-' {
			b.WriteRune(r)
		} else if b.Len() > 0 && r != ' ' && r != '\u00a0' && r != '\'' && r != '\u202f' {
			break // the number ended ("12.99 / month")
		}
	}
	n := strings.Trim(b.String(), ".,")
	if n == "" || n == "-" {
		return 0, false
	}
	dot, comma := strings.LastIndexByte(n, '.'), strings.LastIndexByte(n, ',')
	dec := max(dot, comma)
	if dec >= 0 && (dot < 0 || comma < 0) && (len(n)-dec-1 == 3 || strings.Count(n, n[dec:dec+1]) > 1) {
		dec = -1 // "1,299", "1.299" or "1.299.000": thousands separators
	}
	var out strings.Builder
	for i, r := range n {
		switch {
		case i == dec:
			out.WriteByte('.')
		case r == '.' || r == ',':
		default:
			out.WriteRune(r)
		}
	}
	f, err := strconv.ParseFloat(out.String(), 64)
	return f, err == nil
}
