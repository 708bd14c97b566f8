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

// cond returns the condition picking the rows after the cursor (the
// after= values of a page's next link) in the list's order, with its
// arguments: each %[n]d of it numbers the placeholder of the n-th.
func (k keyset) cond(after []string) (keyCond, error) {
	if len(after) != len(k) {
		return keyCond{}, fmt.Errorf("after= is not a cursor of this list: %d values, want %d", len(after), len(k))
	}
	vals := make([]any, len(k))
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
			return keyCond{}, fmt.Errorf("after= is not a cursor of this list: value %d: %w", i+1, err)
		}
	}
	// Term i of the OR: the columns before i equal the cursor's, column
	// i comes after it. An atom is rendered with its placeholder when a
	// term uses it, so that every argument has one.
	type atom struct {
		col, op string
		val     any
		orNull  bool
	}
	var terms [][]atom
	var eqs []atom
	for i, c := range k {
		// After a NULL come only NULLs (sorted last): no row is strictly
		// after it in this column.
		if vals[i] != nil {
			op := ">"
			if c.desc {
				op = "<"
			}
			terms = append(terms, append(append([]atom(nil), eqs...), atom{c.col, op, vals[i], c.nulls}))
		}
		if vals[i] == nil {
			eqs = append(eqs, atom{col: c.col, op: "IS NULL"})
		} else {
			eqs = append(eqs, atom{col: c.col, op: "=", val: vals[i]})
		}
	}
	if len(terms) == 0 {
		return keyCond{cond: "false"}, nil
	}
	var args []any
	var ors []string
	for _, term := range terms {
		var ands []string
		for _, a := range term {
			if a.val == nil {
				ands = append(ands, a.col+" "+a.op)
				continue
			}
			args = append(args, a.val)
			cond := fmt.Sprintf("%s %s $%%[%d]d", a.col, a.op, len(args))
			if a.orNull {
				cond = "(" + cond + " OR " + a.col + " IS NULL)"
			}
			ands = append(ands, cond)
		}
		ors = append(ors, strings.Join(ands, " AND "))
	}
	return keyCond{cond: "(" + strings.Join(ors, " OR ") + ")", args: args}, nil
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
