package definitions_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// reencode is a JSON document decoded (numbers as written) and encoded
// again: keys sorted, no spaces, at every depth.
func reencode(t *testing.T, b []byte) []byte {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Split takes each watch's JSON as it is within the source's definition,
// without encoding it again: that is its canonical form (what its hash is
// of) however the file spells it — keys out of order, flow and block
// styles, quoting, numbers, HTML characters, line separators, nesting.
func TestSplitWatchesAreCanonical(t *testing.T) {
	t.Parallel()
	src, err := config.ParseSource("sources/odd.yaml", []byte(`name: odd
connector: file
file: {paths: [odd.json]}
watches:
  - when: 'record.title contains "<b>&amp;</b>"'
    name: "z-first"
    title: "{{.Record.Title}} \u2028 é ✓"
    notify: [log]
  - {name: 'a', when: "true", examples: ["0.25", '<&>'], ask: "is it 0.25 or 1e3?"}
  - name: nested
    when: len(record.title) > 3 && len(record.title) < 1234567890123
    budget: {tokens_per_day: 12000, calls_per_day: 3}
    ask: "really?"
    counter_examples: [x, "y"]
`), &config.Global{Sinks: map[string]*config.Sink{"log": {Type: "log"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, ws, err := definitions.Split(src, "", "file:sources/odd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 {
		t.Fatalf("split %d watches, want 3", len(ws))
	}
	for _, w := range ws {
		if want := reencode(t, w.Definition); !bytes.Equal(w.Definition, want) {
			t.Errorf("watch %s: split as\n%s\nwhose canonical form is\n%s", w.Name, w.Definition, want)
		}
	}
}
