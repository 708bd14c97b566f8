package all_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/notify"
	_ "github.com/lookout-dev/lookout/internal/notify/all"
)

// Every sink type lookout ships is registered by importing all.
func TestEverySinkTypeIsRegistered(t *testing.T) {
	want := []string{"command", "email", "log", "slack", "url", "webhook"}
	if got := notify.Kinds(); !slices.Equal(got, want) {
		t.Errorf("registered %v, want %v", got, want)
	}
}

// Every sink type owns its section of docs/delivery.md ("### <type>"
// under "## Sinks") and its keys' rows in the "Sink keys" table, whose
// types column names it.
func TestEverySinkTypeIsDocumented(t *testing.T) {
	data, err := os.ReadFile("../../../docs/delivery.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	_, table, _ := strings.Cut(doc, "### Sink keys")
	table, _, _ = strings.Cut(table, "\n### ")
	rows := map[string][]string{} // key → types
	for line := range strings.Lines(table) {
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			continue
		}
		for _, k := range strings.Split(cells[1], ",") {
			k = strings.Trim(strings.TrimSpace(k), "`")
			for _, typ := range strings.Split(cells[2], ",") {
				rows[k] = append(rows[k], strings.TrimSpace(typ))
			}
		}
	}
	_, sinks, _ := strings.Cut(doc, "\n## Sinks\n")
	sinks, _, _ = strings.Cut(sinks, "\n## ")
	for _, kind := range notify.Kinds() {
		if !strings.Contains(sinks, "\n### "+kind+"\n") {
			t.Errorf("docs/delivery.md has no section ### %s under ## Sinks", kind)
		}
		for _, key := range notify.KindKeys(kind) {
			if !slices.Contains(rows[key], kind) {
				t.Errorf("docs/delivery.md's Sink keys table has no row for %s of a %s sink (rows: %v)", key, kind, rows[key])
			}
		}
	}
}
