package definitions

import (
	"encoding/json"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// BenchmarkValidateWatch is the validation of one watch created through
// the API on a known source, as lookout-bench's (7) sends it.
func BenchmarkValidateWatch(b *testing.B) {
	v := &Validator{Global: &config.Global{Sinks: map[string]*config.Sink{"log": {Type: "log"}}}, Checks: []Check{watchspec.Check}}
	src := &Source{Name: "shared", Definition: json.RawMessage(`{"name": "shared", "every": "1h", "http": {"url": "https://example.com/items"}, "connector": "http"}`)}
	w := []byte(`{"name":"w-000001","notify":["log"],"when":"record.status == \"open\" \u0026\u0026 \"bug\" in record.labels"}`)
	s := &Store{validator: v}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.validateWatch(src, w); err != nil {
			b.Fatal(err)
		}
	}
}
