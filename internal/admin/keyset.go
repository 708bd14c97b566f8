package admin

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// keyCol is a column of a list's order, as its statement sorts it: the
// keyset of its pages.
type keyCol struct {
	// col is the column as the condition names it; field the column of
	// the rows shown, when it is shown under another name.
	col, field string
	// desc: sorted newest or largest first.
	desc bool
	// nulls: the column may be NULL (sorted last, as DESC NULLS LAST and
	// ASC sort them).
	nulls bool
}

// keyset is a list's order, column by column, unique as a whole (its last
// column is a key of the rows): the rows after a page's last row are the
// next page.
type keyset []keyCol

// after returns the cursor of the page after row: its key columns'
// values, in order ("null:" for NULL, else a type and the value).
func (k keyset) after(row map[string]any) (url.Values, error) {
	v := url.Values{}
	for _, c := range k {
		f := c.field
		if f == "" {
			f = c.col
		}
		var s string
		switch x := row[f].(type) {
		case nil:
			s = "null:"
		case time.Time:
			s = "t:" + x.UTC().Format(time.RFC3339Nano)
		case int64:
			s = "i:" + strconv.FormatInt(x, 10)
		case int32:
			s = "i:" + strconv.FormatInt(int64(x), 10)
		case string:
			s = "s:" + x
		default:
			return nil, fmt.Errorf("column %s of the list's order holds a %T, which a cursor cannot carry", f, x)
		}
		v.Add("after", s)
	}
	return v, nil
}

// values returns the cursor of a page (the after= values of the previous
// page's next link): the values of the keyset's columns, in order, each
// NULL when the last row shown had NULL there; a list's statement takes
// them as its last parameters and reads the rows after them in its
// order. Without after= (the first page) every value is NULL.
func (k keyset) values(after []string) ([]any, error) {
	vals := make([]any, len(k))
	if len(after) == 0 {
		return vals, nil
	}
	if len(after) != len(k) {
		return nil, fmt.Errorf("after= is not a cursor of this list: %d values, want %d", len(after), len(k))
	}
	for i, a := range after {
		typ, s, _ := strings.Cut(a, ":")
		var err error
		switch typ {
		case "null":
			if !k[i].nulls {
				err = fmt.Errorf("%s is never NULL", k[i].col)
			}
		case "t":
			vals[i], err = time.Parse(time.RFC3339Nano, s)
		case "i":
			vals[i], err = strconv.ParseInt(s, 10, 64)
		case "s":
			vals[i] = s
		default:
			err = fmt.Errorf("%q is not a cursor value (null:, t:TIME, i:NUMBER or s:TEXT)", a)
		}
		if err != nil {
			return nil, fmt.Errorf("after= is not a cursor of this list: value %d: %w", i+1, err)
		}
	}
	return vals, nil
}

// nextLink is path with qs's parameters but after=, and the cursor of
// the page after row.
func (k keyset) nextLink(path string, qs url.Values, row map[string]any) (string, error) {
	cur, err := k.after(row)
	if err != nil {
		return "", err
	}
	v := url.Values{}
	for p, vs := range qs {
		if p != "after" && p != "done" && p != "error" {
			v[p] = vs
		}
	}
	v["after"] = cur["after"]
	return path + "?" + v.Encode(), nil
}
