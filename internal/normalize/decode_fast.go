package normalize

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// fastDecode decodes data as the reference path (referenceDecode) does,
// with jsontext's tokenizer and fewer allocations: an object's keys are
// interned across the items of a page, each map is made at its size, and
// numbers become int64 or float64 without a json.Number between. ok is
// false for input it does not take (anything jsontext refuses, such as
// invalid UTF-8 or a lone surrogate escape): the caller then decodes with
// the reference path, whose value or error is the one returned.
// FuzzDecodeMatchesReference holds the two paths to the same values.
func fastDecode(data []byte) (v any, ok bool) {
	fd := fastDecoders.Get().(*fastDecoder)
	defer fd.release()
	// jsontext reads a bytes.Buffer in place.
	*fd.in = *bytes.NewBuffer(data)
	fd.dec.Reset(fd.in, decodeOptions)
	if k := fd.dec.PeekKind(); k != '{' && k != '[' {
		// A page is an object or an array; anything else, such as a
		// number alone (the reference path refuses 1E400 there, not
		// within an object), is the reference path's.
		return nil, false
	}
	v, err := fd.value()
	if err != nil {
		return nil, false
	}
	// Nothing but white space after the value.
	if _, err := fd.dec.ReadToken(); err != io.EOF {
		return nil, false
	}
	return v, true
}

// decodeOptions: a repeated key keeps its last value, as the reference
// path's map assignment does.
var decodeOptions = jsontext.AllowDuplicateNames(true)

// fastDecoder is a tokenizer and its scratch, reused across pages.
type fastDecoder struct {
	dec *jsontext.Decoder
	in  *bytes.Buffer // the input, read in place
	// keys interns object keys: a page's items repeat theirs.
	keys map[string]string
	// entries is the stack of the objects being decoded: each reads its
	// entries onto it, then makes its map at its size.
	entries []entry
	// values is the same stack for arrays.
	values []any
	unq    []byte
}

type entry struct {
	k string
	v any
}

var fastDecoders = sync.Pool{New: func() any {
	in := new(bytes.Buffer)
	return &fastDecoder{dec: jsontext.NewDecoder(in), in: in, keys: make(map[string]string)}
}}

// maxInterned bounds the keys a decoder interns (an object keyed by
// ids has as many keys as entries, and would gain nothing), maxScratch
// the entries and bytes of scratch it keeps for the next page.
const (
	maxInterned = 4096
	maxScratch  = 1 << 16
)

// release returns fd to the pool, holding nothing of the page it decoded.
func (fd *fastDecoder) release() {
	// Each object or array clears what it popped; a failed decode leaves
	// its unfinished ones below len.
	clear(fd.entries)
	clear(fd.values)
	fd.entries, fd.values = fd.entries[:0], fd.values[:0]
	if cap(fd.entries) > maxScratch || cap(fd.values) > maxScratch || cap(fd.unq) > maxScratch {
		fd.entries, fd.values, fd.unq = nil, nil, nil
	}
	*fd.in = bytes.Buffer{} // keeps no page alive
	fd.dec.Reset(fd.in)
	fastDecoders.Put(fd)
}

// errKind is a token where a value should be (jsontext reports those
// first; this is the guard if it did not).
var errKind = errors.New("unexpected token")

// value decodes the next value.
func (fd *fastDecoder) value() (any, error) {
	switch fd.dec.PeekKind() {
	case '{':
		if _, err := fd.dec.ReadToken(); err != nil {
			return nil, err
		}
		base := len(fd.entries)
		for fd.dec.PeekKind() != '}' {
			raw, err := fd.dec.ReadValue()
			if err != nil {
				return nil, err
			}
			k, err := fd.key(raw)
			if err != nil {
				return nil, err
			}
			v, err := fd.value()
			if err != nil {
				return nil, err
			}
			fd.entries = append(fd.entries, entry{k, v})
		}
		if _, err := fd.dec.ReadToken(); err != nil {
			return nil, err
		}
		es := fd.entries[base:]
		m := make(map[string]any, len(es))
		for _, e := range es {
			m[e.k] = e.v
		}
		clear(es)
		fd.entries = fd.entries[:base]
		return m, nil
	case '[':
		if _, err := fd.dec.ReadToken(); err != nil {
			return nil, err
		}
		base := len(fd.values)
		for fd.dec.PeekKind() != ']' {
			v, err := fd.value()
			if err != nil {
				return nil, err
			}
			fd.values = append(fd.values, v)
		}
		if _, err := fd.dec.ReadToken(); err != nil {
			return nil, err
		}
		vs := fd.values[base:]
		a := make([]any, len(vs))
		copy(a, vs)
		clear(vs)
		fd.values = fd.values[:base]
		return a, nil
	case '"':
		raw, err := fd.dec.ReadValue()
		if err != nil {
			return nil, err
		}
		return fd.text(raw)
	case '0':
		raw, err := fd.dec.ReadValue()
		if err != nil {
			return nil, err
		}
		// As Numbers does with a json.Number.
		if i, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return i, nil
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			// Out of float64's range: the reference path refuses it.
			return nil, err
		}
		return f, nil
	case 't', 'f', 'n':
		tok, err := fd.dec.ReadToken()
		if err != nil {
			return nil, err
		}
		switch tok.Kind() {
		case 't':
			return true, nil
		case 'f':
			return false, nil
		}
		return nil, nil
	default:
		// An error, the end of the input, or a closing token out of place.
		if _, err := fd.dec.ReadToken(); err != nil {
			return nil, err
		}
		return nil, errKind
	}
}

// text is the JSON string raw (quoted, validated by jsontext) as a Go
// string of its own.
func (fd *fastDecoder) text(raw jsontext.Value) (string, error) {
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		return string(in), nil
	}
	var err error
	if fd.unq, err = jsontext.AppendUnquote(fd.unq[:0], raw); err != nil {
		return "", err
	}
	return string(fd.unq), nil
}

// key is the object key raw (quoted), interned.
func (fd *fastDecoder) key(raw jsontext.Value) (string, error) {
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') >= 0 {
		return fd.text(raw)
	}
	if k, ok := fd.keys[string(in)]; ok {
		return k, nil
	}
	k := string(in)
	if len(fd.keys) < maxInterned {
		fd.keys[k] = k
	}
	return k, nil
}
