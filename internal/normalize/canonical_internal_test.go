package normalize

import (
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

// TestPlain8 checks the eight-byte test against the byte-wise rule for
// every byte value at every position of an otherwise plain word.
func TestPlain8(t *testing.T) {
	t.Parallel()
	for pos := range 8 {
		for c := range 256 {
			w := []byte("abcdefgh")
			w[pos] = byte(c)
			var x uint64
			for i := range 8 {
				x |= uint64(w[i]) << (8 * i)
			}
			want := c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\'
			if got := plain8(x); got != want {
				t.Errorf("plain8(%q) = %v, want %v", w, got, want)
			}
		}
	}
}

// appendStringBytewise is appendString as it was before its eight-byte
// fast path: the reference its output must equal.
func appendStringBytewise(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
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
			b = append(b, "\uFFFD"...)
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

// TestAppendStringMatchesBytewise compares appendString with the
// byte-wise reference on random strings mixing plain ASCII, escapes,
// control bytes, multi-byte runes, U+2028 and invalid UTF-8.
func TestAppendStringMatchesBytewise(t *testing.T) {
	t.Parallel()
	pieces := []string{"a", "plain text ", "0123456789", "\"", "\\", "\n", "\r", "\t", "\x00", "\x01", "\x1f", "\x7f",
		"é", "日本", "🎉", "\u2028", "\u2029", "\xff", "\xc3", "\xe2\x80", "<>&", "/"}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 20000 {
		var s []byte
		for range rng.IntN(24) {
			s = append(s, pieces[rng.IntN(len(pieces))]...)
		}
		got := string(appendString(nil, string(s)))
		if want := string(appendStringBytewise(nil, string(s))); got != want {
			t.Fatalf("case %d: appendString(%q) = %q, want %q", n, s, got, want)
		}
	}
}
