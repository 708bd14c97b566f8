package normalize_test

import (
	"reflect"
	"strconv"
	"testing"

	"github.com/lookout-dev/lookout/internal/normalize"
)

// TestDecodeEachDecodesAsDecode decodes values of every JSON kind in one
// run and checks each against Decode of it alone (integers as int64, other
// numbers as float64, nested in place), and that a batch with a value that
// is not one JSON value fails.
func TestDecodeEachDecodesAsDecode(t *testing.T) {
	t.Parallel()
	datas := []string{
		`{"n": 10000001}`, `{}`, `[]`, `null`, `true`, `"text with \"quotes\", \u00e9 and \n"`,
		`9223372036854775807`, `9223372036854775808`, `-0`, `1.5e3`, `0.1`, `12345678901234567890123`,
		`{"a": [1, 2.5, {"b": [3, {"c": -4}]}], "d": null, "e": "x", "f": {"g": 1e300}}`,
		` { "spaced" : [ 1 , 2 ] } `, `{"dup": 1, "dup": 2}`,
	}
	in := make([][]byte, len(datas))
	for i, d := range datas {
		in[i] = []byte(d)
	}
	got, err := normalize.DecodeEach(in)
	if err != nil {
		t.Fatalf("DecodeEach: %v", err)
	}
	if len(got) != len(datas) {
		t.Fatalf("%d values, want %d", len(got), len(datas))
	}
	for i, d := range datas {
		want, err := normalize.Decode([]byte(d))
		if err != nil {
			t.Fatalf("Decode(%s): %v", d, err)
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("value %d %s: DecodeEach gives %#v, Decode %#v", i, d, got[i], want)
		}
	}
	for _, bad := range [][]string{{`{"a": 1}`, `{"b":`}, {`1, 2`}, {`1`, ``}, {`[1] [2]`}} {
		in := make([][]byte, len(bad))
		for i, d := range bad {
			in[i] = []byte(d)
		}
		if vs, err := normalize.DecodeEach(in); err == nil {
			t.Errorf("DecodeEach(%q) = %#v, want an error", bad, vs)
		}
	}
}

// BenchmarkDecodeExtras decodes 2,000 extras of the benchmark's records
// (docs/benchmarks.md (4), one claim's): each with Decode, and all with
// DecodeEach.
func BenchmarkDecodeExtras(b *testing.B) {
	datas := make([][]byte, 2000)
	for i := range datas {
		datas[i] = []byte(`{"n": ` + strconv.Itoa(10_000_000+i) + `}`)
	}
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, d := range datas {
				if _, err := normalize.Decode(d); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("DecodeEach", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := normalize.DecodeEach(datas); err != nil {
				b.Fatal(err)
			}
		}
	})
}
