package normalize

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	gojson "github.com/goccy/go-json"
)

// probeDocument holds the numbers and strings where two JSON decoders
// may differ and that the fast path takes: integers at and past int64's
// bounds, negative zero, fractions and exponents, escapes, a surrogate
// pair, repeated keys.
const probeDocument = `{"i":[0,-0,1,-1,9223372036854775807,9223372036854775808,-9223372036854775808,-9223372036854775809,123456789012345678901234567890],` +
	`"f":[1.0,-0.0,0.1,1e2,1E-400,2.5e-324,1.7976931348623157e308],"s":["\u0000","\ud83d\ude00","\/","ÿ","é","a\"b\\c\n\t"],` +
	`"k":1,"k":{"n":null,"t":true,"e":[],"o":{},"k":2,"\u006b":3}}`

// decodeSeeds are FuzzDecodeMatchesReference's seeds and
// TestDecodeMatchesReference's cases.
var decodeSeeds = []string{probeDocument, `{"a":1} x`, `{"a":1}  `, `1E400`, `[1e400]`, `{"a":-1e400}`, `[1e-400]`, `[1,2.5,"x",null,true,false]`, `{"a":{"b":[{"c":-0.0}]}}`,
	"\"\xff\xfe\"", "{\"a\":\"\xc3\"}", `"\ud800\udc00"`, `["\ud800"]`, `{"a":"\udc00"}`, `["\ud800x"]`, `["\udc00\ud800"]`, "[\"\xff\"]", `{"":0}`, ` 12 `, `[]`, `{}`, `{"a":1,}`, `[1,]`, `01`, `-`, `1.`, `.5`, `+1`,
	`"\u00e9"`, `"\x"`, "\"a\tb\"", `{"a" 1}`, `{1:2}`, `[1 2]`, `nul`, `truex`, ``, ` `, `"`, `{"a":1}{"b":2}`, `[[[[[[]]]]]]`,
	pageSeed,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001), goccyPanics}

// pageSeed is a page as APIs send them.
const pageSeed = `{"data":[{"id":1,"title":"Ticket 1","labels":["a","b"],"priority":3,"score":0.25,"created_at":"2026-01-01T00:00:00Z"}],"links":{"next":null}}`

// goccyPanics is input goccy/go-json's stream decoder panics on (v0.10.5:
// an index out of range in its buffer), found by
// FuzzDecodeMatchesReference: a key of 600 bytes of invalid UTF-8.
var goccyPanics = `{"` + strings.Repeat("\xdd", 600) + `":1}`

// FuzzDecodeMatchesReference: whatever Decode decodes, the reference path
// decodes to the same value (so the content hash of every record stays
// what it was), and input the reference path refuses, Decode refuses.
func FuzzDecodeMatchesReference(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeMatchesReference(t, data)
	})
}

// TestDecodeMatchesReference runs the seeds of
// FuzzDecodeMatchesReference, and says which of them the fast path takes.
func TestDecodeMatchesReference(t *testing.T) {
	taken := 0
	for _, s := range decodeSeeds {
		checkDecodeMatchesReference(t, []byte(s))
		if _, ok := fastDecode([]byte(s)); ok {
			taken++
		}
	}
	// The probe and the page are the fast path's, not the reference's.
	for _, s := range []string{probeDocument, pageSeed} {
		if _, ok := fastDecode([]byte(s)); !ok {
			t.Errorf("fastDecode refused %.60s…", s)
		}
	}
	t.Logf("the fast path took %d of %d seeds", taken, len(decodeSeeds))
}

func checkDecodeMatchesReference(t *testing.T, data []byte) {
	t.Helper()
	ref, refErr := referenceDecode(data)
	got, err := Decode(data)
	if (err == nil) != (refErr == nil) {
		t.Fatalf("Decode(%q): error %v, the reference path's %v", data, err, refErr)
	}
	if err == nil && !reflect.DeepEqual(got, ref) {
		t.Fatalf("Decode(%q) = %#v, the reference path gives %#v", data, got, ref)
	}
}

// TestDecodeKeepsNoInput: strings and keys are copied out of the input,
// so an item decoded from a page keeps no page alive, and a reused
// buffer does not change what was decoded from it.
func TestDecodeKeepsNoInput(t *testing.T) {
	in := []byte(`{"key":"value","list":["one",{"inner":"two","esc":"a\nb"}],"n":12345}`)
	v, err := Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := referenceDecode([]byte(string(in)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = 'x'
	}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("after the input was overwritten, the decoded value is %#v, want %#v", v, want)
	}
}

// TestFailedDecodeLeavesNothing: a decode that fails midway (the input
// ends inside nested objects and arrays) returns its decoder to the pool
// holding none of the input's values, and the next decode is whole.
func TestFailedDecodeLeavesNothing(t *testing.T) {
	fd := fastDecoders.New().(*fastDecoder)
	*fd.in = *bytesBuffer(`{"a":{"b":"kept?","c":[1,"two",{"d":"deep"`)
	fd.dec.Reset(fd.in, decodeOptions)
	if _, err := fd.value(); err == nil {
		t.Fatal("the truncated input decoded")
	}
	if len(fd.entries) == 0 && len(fd.values) == 0 {
		t.Fatal("the failed decode left no unfinished entries: the test no longer covers release")
	}
	fd.release()
	for i, e := range fd.entries[:cap(fd.entries)] {
		if e != (entry{}) {
			t.Errorf("entries[%d] = %#v after release, want it cleared", i, e)
		}
	}
	for i, v := range fd.values[:cap(fd.values)] {
		if v != nil {
			t.Errorf("values[%d] = %#v after release, want it cleared", i, v)
		}
	}
	checkDecodeMatchesReference(t, []byte(`{"a":{"b":"x","c":[1,"two",{"d":"deep"}]}}`))
}

func bytesBuffer(s string) *bytes.Buffer { return bytes.NewBufferString(s) }

// TestDecodeSurvivesThePanickingReference: input that makes goccy/go-json
// panic (and that the fast path refuses: invalid UTF-8) decodes through
// encoding/json instead; an upstream page cannot stop the process.
func TestDecodeSurvivesThePanickingReference(t *testing.T) {
	func() {
		defer func() {
			if recover() == nil {
				t.Log("goccy/go-json no longer panics on goccyPanics: the recovery is not exercised here")
			}
		}()
		dec := gojson.NewDecoder(strings.NewReader(goccyPanics))
		var v any
		_ = dec.Decode(&v)
	}()
	v, err := Decode([]byte(goccyPanics))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := map[string]any{strings.Repeat("\uFFFD", 600): int64(1)}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("Decode = %#v, want the key's invalid bytes replaced and the value an int64", v)
	}
}
