package definitions

import (
	"encoding/json"
	"testing"
)

// validateWatch reads a watch sent as JSON (the API's, the MCP tools')
// without a YAML pass of its own: the whole document is parsed once
// (Validator.Sent), and a YAML watch gives the same stored definition.
func TestValidateWatchReadsJSONOnce(t *testing.T) {
	// Not parallel: testing.AllocsPerRun.
	s := &Store{validator: &Validator{}}
	src := &Source{Name: "blog", Definition: json.RawMessage(`{"name": "blog", "connector": "file", "file": {"paths": ["blog.json"]}}`)}
	asJSON := []byte(`{"name": "w", "notify": [], "when": "record.status == \"open\""}`)
	asYAML := []byte("name: w\nwhen: record.status == \"open\"\nnotify: []\n")
	j, err := s.validateWatch(src, asJSON)
	if err != nil {
		t.Fatal(err)
	}
	y, err := s.validateWatch(src, asYAML)
	if err != nil {
		t.Fatal(err)
	}
	if string(j.Definition) != string(y.Definition) || j.Hash != y.Hash || j.Name != "w" {
		t.Errorf("the watch as JSON = %s (%s), as YAML = %s (%s); want the same definition", j.Definition, j.Hash, y.Definition, y.Hash)
	}
	yamlAllocs := testing.AllocsPerRun(50, func() { _, _ = s.validateWatch(src, asYAML) })
	jsonAllocs := testing.AllocsPerRun(50, func() { _, _ = s.validateWatch(src, asJSON) })
	if jsonAllocs > yamlAllocs*0.85 {
		t.Errorf("validateWatch allocates %.0f times for the watch as JSON and %.0f as YAML: the JSON went through a YAML pass of its own", jsonAllocs, yamlAllocs)
	}
	for _, bad := range []string{`{"name": "w", "when": "record.status =="}`, `{"name": "w"`, `[1]`, `"w"`} {
		if _, err := s.validateWatch(src, []byte(bad)); err == nil {
			t.Errorf("validateWatch(%s) = nil error", bad)
		}
	}
}
