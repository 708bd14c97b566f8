package normalize

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Canonical encodes v as canonical JSON: object keys sorted bytewise, no
// insignificant whitespace, no HTML escaping, integers in decimal, other
// numbers in the shortest form that round-trips ('g' with exponent only for
// very large or small values), strings with the minimal JSON escapes and
// invalid UTF-8 and NUL replaced by U+FFFD. The content hash is SHA-256 of this
// form, so it is part of the stored data's contract: changing it changes
// every hash.
//
// Values other than nil, bool, string, integers, float64, []any, []string,
// map[string]any and times are encoded through encoding/json first.
func Canonical(v any) []byte {
	return AppendCanonical(make([]byte, 0, 256), v)
}

// AppendCanonical appends the canonical encoding of v to b.
func AppendCanonical(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, x)
	case string:
		return appendString(b, x)
	case int:
		return strconv.AppendInt(b, int64(x), 10)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case int32:
		return strconv.AppendInt(b, int64(x), 10)
	case float64:
		return appendFloat(b, x)
	case time.Time:
		return appendTime(b, x)
	case *time.Time:
		if x == nil {
			return append(b, "null"...)
		}
		return appendTime(b, *x)
	case []string:
		return appendStrings(b, x)
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendCanonical(b, e)
		}
		return append(b, ']')
	case map[string]any:
		var stack [16]any
		keys, vals := sortedEntries(x, stack[:0])
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = AppendCanonical(b, vals[i])
		}
		return append(b, '}')
	}
	// Other values (e.g. []int from an expression): through encoding/json
	// and back, so that they take the canonical form of what they encode to.
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("normalize: canonical encoding of %T: %v", v, err))
	}
	back, err := Decode(data)
	if err != nil {
		panic(fmt.Sprintf("normalize: canonical encoding of %T: %v", v, err))
	}
	return AppendCanonical(b, back)
}

// appendStrings appends x as a JSON array of strings.
func appendStrings(b []byte, x []string) []byte {
	b = append(b, '[')
	for i, s := range x {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendTime appends t in UTC as an RFC 3339 JSON string: the digits and
// signs of the format need no escaping, so it is appendString of Format
// without the string.
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// maxCachedKeys bounds the size of the objects whose sorted keys are cached.
const maxCachedKeys = 64

// keyOrders caches, per object size, the sorted keys of the last object of
// that size that was encoded: items of one source share their keys, and
// sorting them again for every item is most of the cost of encoding them.
// A published slice is never changed, so readers share it without a lock.
var keyOrders [maxCachedKeys + 1]atomic.Pointer[[]string]

// sortedEntries returns the keys of x, sorted bytewise, and their values
// appended to vals[:0] in the same order. The caller must not change the
// keys: they may be the cached order shared by every goroutine.
func sortedEntries(x map[string]any, vals []any) ([]string, []any) {
	n := len(x)
	vals = vals[:0]
	if n <= maxCachedKeys {
		if p := keyOrders[n].Load(); p != nil {
			// The cached keys are distinct and as many as x has: they are
			// x's if x has every one of them.
			keys := *p
			for _, k := range keys {
				v, ok := x[k]
				if !ok {
					break
				}
				vals = append(vals, v)
			}
			if len(vals) == n {
				return keys, vals
			}
			vals = vals[:0]
		}
	}
	keys := make([]string, 0, n)
	for k := range x {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if n <= maxCachedKeys {
		keyOrders[n].Store(&keys)
	}
	for _, k := range keys {
		vals = append(vals, x[k])
	}
	return keys, vals
}

func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	if f == 0 {
		return append(b, '0') // also -0
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e21 {
		return strconv.AppendFloat(b, f, 'f', -1, 64)
	}
	abs := math.Abs(f)
	if abs < 1e-6 || abs >= 1e21 {
		return strconv.AppendFloat(b, f, 'e', -1, 64)
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

const hexDigits = "0123456789abcdef"

const (
	ones  = 0x0101010101010101 // 0x01 in every byte
	highs = 0x8080808080808080 // the high bit of every byte
)

// plain8 reports whether none of the eight bytes in x needs appendString's
// attention: none is a control character (< 0x20), '"', '\\' or outside
// ASCII. (x - n*ones) &^ x has a byte's high bit set where a byte is below
// n (for n <= 128), the classic "has less" test; a byte equal to c is a
// zero byte of x ^ c*ones.
func plain8(x uint64) bool {
	quote, backslash := x^('"'*ones), x^('\\'*ones)
	special := (x - 0x20*ones) &^ x
	special |= (quote - ones) &^ quote
	special |= (backslash - ones) &^ backslash
	return (special|x)&highs == 0
}

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight plain ASCII bytes at a time: most text has nothing to
		// escape or check.
		if i+8 <= len(s) && plain8(uint64(s[i])|uint64(s[i+1])<<8|uint64(s[i+2])<<16|uint64(s[i+3])<<24|
			uint64(s[i+4])<<32|uint64(s[i+5])<<40|uint64(s[i+6])<<48|uint64(s[i+7])<<56) {
			i += 8
			continue
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case 0:
				// PostgreSQL's text and jsonb cannot hold NUL: U+FFFD stands in.
				b = append(b, "\uFFFD"...)
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\uFFFD"...) // the replacement character itself, as UTF-8
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
