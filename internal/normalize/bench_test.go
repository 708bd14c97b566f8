package normalize_test

import (
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/normalize"
)

// benchPage is a page of 1,000 tickets as internal/bench serves them.
func benchPage() []byte {
	return []byte(`{"data":[` + strings.Join(benchTickets(0, 1000), ",") + `],"links":{"next":"/tickets?page=2"}}`)
}

func benchItems(b *testing.B) []any {
	b.Helper()
	doc, err := normalize.Decode(benchPage())
	if err != nil {
		b.Fatal(err)
	}
	return doc.(map[string]any)["data"].([]any)
}

// BenchmarkDecodePage decodes a page of 1,000 tickets.
func BenchmarkDecodePage(b *testing.B) {
	page := benchPage()
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := normalize.Decode(page); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePageReference decodes BenchmarkDecodePage's page with
// the reference path alone (goccy/go-json's stream decoder, UseNumber,
// Numbers), which Decode falls back on: the two side by side are the
// fast path's gain.
func BenchmarkDecodePageReference(b *testing.B) {
	page := benchPage()
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := normalize.ReferenceDecode(page); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMapTickets maps a decoded page of 1,000 tickets with the
// default mapping (the bench's), raw JSON left to the mapper.
func BenchmarkMapTickets(b *testing.B) {
	items := benchItems(b)
	m, err := normalize.NewMapper(normalize.FieldExprs{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, it := range items {
			if _, err := m.Map(it, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkDecodeMapPage decodes a page of 1,000 tickets and maps every
// item: the syncer's CPU per page on the Go side.
func BenchmarkDecodeMapPage(b *testing.B) {
	page := benchPage()
	m, err := normalize.NewMapper(normalize.FieldExprs{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		doc, err := normalize.Decode(page)
		if err != nil {
			b.Fatal(err)
		}
		for _, it := range doc.(map[string]any)["data"].([]any) {
			if _, err := m.Map(it, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
}
