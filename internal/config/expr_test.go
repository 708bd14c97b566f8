package config_test

import (
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
)

// TestLoadExpressionErrors changes one expression of a valid source and
// checks the exact error: every expression is type-checked at load, against
// the record's shape, so a watch that could never fire is refused by
// `check` and by `run` alike.
func TestLoadExpressionErrors(t *testing.T) {
	t.Parallel()
	replace := func(old, new string) string {
		if !strings.Contains(validSource, old) {
			t.Fatalf("test bug: %q not in the valid source", old)
		}
		return strings.Replace(validSource, old, new, 1)
	}
	// A source whose fields.extra declares the extra keys.
	declared := replace("watches:", "fields:\n  extra:\n    priority: item.prio\n    assignee: item.owner.login\nwatches:")
	when := func(src, expr string) string {
		return strings.Replace(src, `    when: record.status == "open"`, "    when: '"+expr+"'", 1)
	}
	tests := []struct {
		name, source, want string
	}{
		{"unknown field", when(validSource, `record.stauts == "open"`),
			`sources/tasks.yaml:11: watches[0].when: unknown field record.stauts (did you mean record.status?)`},
		{"not a boolean", when(validSource, `record.title`),
			`sources/tasks.yaml:11: watches[0].when: must be true or false, not a string`},
		{"unknown variable", when(validSource, `recrod.status == "open"`),
			`sources/tasks.yaml:11: watches[0].when: unknown name recrod (did you mean record?) (known: change, changed, previous, record, source)`},
		{"unknown field of previous", when(validSource, `previous.titel != record.title`),
			`sources/tasks.yaml:11: watches[0].when: unknown field previous.titel (did you mean previous.title?)`},
		{"unknown field of change", when(validSource, `change.knd == "created"`),
			`sources/tasks.yaml:11: watches[0].when: unknown field change.knd (did you mean change.kind?)`},
		{"every unknown field", when(validSource, `record.stauts == "open" && change.knd == "created"`),
			"sources/tasks.yaml:11: watches[0].when: unknown field record.stauts (did you mean record.status?)\n" +
				"sources/tasks.yaml:11: watches[0].when: unknown field change.knd (did you mean change.kind?)"},
		{"type mismatch", when(validSource, `record.title > 3`),
			`sources/tasks.yaml:11: watches[0].when: invalid operation: > (mismatched types string and int) (at 1:14)`},
		{"syntax", when(validSource, `record.title ==`),
			`sources/tasks.yaml:11: watches[0].when: unexpected token EOF (at 1:15)`},
		{"changed() of an unknown field", when(validSource, `changed("stauts")`),
			`sources/tasks.yaml:11: watches[0].when: changed("stauts") names an unknown field (did you mean status?)`},
		{"extra key without fields.extra", when(validSource, `record.extra.plan != "free"`),
			`sources/tasks.yaml:11: watches[0].when: unknown field record.extra.plan: the source's fields.extra is not set, so extra holds whatever keys the item has; read one with get(record.extra, "plan"), which is nil when the item has no such key`},
		{"extra key not declared", when(declared, `record.extra.priorty >= 3`),
			`sources/tasks.yaml:15: watches[0].when: unknown field record.extra.priorty (did you mean record.extra.priority?)`},
		{"get() of a key not declared", when(declared, `get(record.extra, "owner") != nil`),
			`sources/tasks.yaml:15: watches[0].when: unknown field record.extra.owner (fields.extra declares assignee, priority)`},
		{"changed() of an extra key not declared", when(declared, `changed("extra.priorty")`),
			`sources/tasks.yaml:15: watches[0].when: changed("extra.priorty") names an unknown field (did you mean extra.priority?)`},
		{"stop.when unknown field", replace("watches:", "stop: {when: 'run.stauts == \"succeeded\"'}\nwatches:"),
			`sources/tasks.yaml:9: stop.when: unknown field run.stauts (did you mean run.status?)`},
		{"stop.when not a boolean", replace("watches:", "stop: {when: 'run.seen'}\nwatches:"),
			`sources/tasks.yaml:9: stop.when: must be true or false, not a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(writeDir(t, validGlobal, tt.source))
			if err == nil {
				t.Fatalf("Load succeeded, want error %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("error:\n got: %s\nwant: %s", err, tt.want)
			}
		})
	}
}

// TestLoadExpressionsThatWork are conditions the documentation shows: they
// must keep loading.
func TestLoadExpressionsThatWork(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{
		`record.status == "open" && "urgent" in record.labels`,
		`change.kind == "updated" && changed("status") && previous.status == "closed"`,
		`change.kind == "created" && get(record.extra, "kind") == "pr"`,
		`(get(record.extra, "priority") ?? 0) >= 3`,
		`previous?.status == "closed" && change.version > 1`,
		`record.title matches "(?i)go 1\\.\\d+" && len(record.labels) > 0`,
		`changed("extra.views") || record.updated_at != nil`,
	} {
		src := strings.Replace(validSource, `    when: record.status == "open"`, "    when: '"+expr+"'", 1)
		if _, err := config.Load(writeDir(t, validGlobal, src)); err != nil {
			t.Errorf("%s: %v", expr, err)
		}
	}
}
