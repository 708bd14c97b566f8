package reports

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var timeNow = time.Now

// block is one ```sql block of the cookbook.
type block struct {
	heading string // the nearest heading above it, without the #s
	line    int
	sql     string
}

// cookbook reads the sql blocks of docs/cookbook.md.
func cookbook(t *testing.T) []block {
	t.Helper()
	f, err := os.Open("../../docs/cookbook.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []block
	var heading string
	var cur *block
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.sql += line + "\n"
		case strings.TrimSpace(line) == "```sql":
			cur = &block{heading: heading, line: n + 1}
		case strings.HasPrefix(line, "#"):
			heading = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("docs/cookbook.md:%d: sql block is not closed", cur.line)
	}
	return out
}

var psqlVar = regexp.MustCompile(`:'([A-Za-z_][A-Za-z0-9_]*)'|:([A-Za-z_][A-Za-z0-9_]*)`)

// substitute replaces psql variables (:'name' quoted, :name as is) by
// vars; a `::` cast is left alone. An unknown variable is an error.
func substitute(sql string, vars map[string]string) (string, error) {
	var b strings.Builder
	var bad []string
	last := 0
	for _, m := range psqlVar.FindAllStringSubmatchIndex(sql, -1) {
		start := m[0]
		if start > 0 && sql[start-1] == ':' {
			continue // a cast: x::text
		}
		b.WriteString(sql[last:start])
		quoted := m[2] >= 0
		var name string
		if quoted {
			name = sql[m[2]:m[3]]
		} else {
			name = sql[m[4]:m[5]]
		}
		v, ok := vars[name]
		switch {
		case !ok:
			bad = append(bad, name)
		case quoted:
			b.WriteString("'" + strings.ReplaceAll(v, "'", "''") + "'")
		default:
			b.WriteString(v)
		}
		last = m[1]
	}
	b.WriteString(sql[last:])
	if len(bad) > 0 {
		return "", fmt.Errorf("unknown psql variable(s) %v (known: source, record_id, run_id)", bad)
	}
	return b.String(), nil
}

func TestSubstitute(t *testing.T) {
	got, err := substitute("SELECT :'source', :run_id, x::text FROM t WHERE a = :'source'", map[string]string{"source": "o'k", "run_id": "7"})
	want := "SELECT 'o''k', 7, x::text FROM t WHERE a = 'o''k'"
	if err != nil || got != want {
		t.Errorf("substitute = %q, %v\nwant %q", got, err, want)
	}
	if _, err := substitute("SELECT :'nope'", nil); err == nil {
		t.Error("an unknown variable is not an error")
	}
}

// check asserts what a question's query returned.
type check func(t *testing.T, w *world, rows []map[string]any)

// TestCookbook runs every sql block of docs/cookbook.md against a
// database the real pipeline filled, and checks that each of the seven
// questions answers what happened; then reads every report view.
func TestCookbook(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.populate()
	if len(w.runs) != 5 {
		t.Fatalf("%d tasks runs, want 5", len(w.runs))
	}
	created, edited, failedRun, recovered := w.runs[0], w.runs[1], w.runs[3], w.runs[4]
	vars := map[string]string{"source": "tasks", "record_id": "t-3", "run_id": strconv.FormatInt(edited, 10)}

	questions := map[string]check{
		"1. What did it run?": func(t *testing.T, w *world, rows []map[string]any) {
			// Five runs of tasks, five of archive: its first created its
			// records, the other four were quiet (no sync_runs row; counted
			// in sync_run_hours, one row per hour).
			byRun := map[int64]map[string]any{}
			recorded, quiet := 0, int32(0)
			for _, r := range rows {
				if r["run_id"] == nil {
					if r["status"] != "quiet" || r["source"] != "archive" {
						t.Errorf("quiet runs row: %v", r)
					}
					quiet += r["runs"].(int32)
					continue
				}
				recorded++
				byRun[r["run_id"].(int64)] = r
			}
			if recorded != 6 || quiet != 4 {
				t.Errorf("%d recorded runs and %d quiet ones, want 6 and 4", recorded, quiet)
			}
			wantCounts := map[int64]string{created: "5 0 6", edited: "2 0 1", failedRun: "0 0 0"}
			for id, want := range wantCounts {
				r := byRun[id]
				if r == nil {
					t.Errorf("run %d missing", id)
					continue
				}
				if got := fmt.Sprintf("%v %v %s", r["changes"], r["pending"], Cell(r["notify_decisions"])); got != want {
					t.Errorf("run %d: changes, pending, notify decisions = %s, want %s", id, got, want)
				}
			}
			if r := byRun[failedRun]; r == nil || r["status"] != "failed" {
				t.Errorf("the failed run: %v", r)
			}
		},
		"2. Why did it run?": func(t *testing.T, w *world, rows []map[string]any) {
			if len(rows) != 5 {
				t.Fatalf("%d runs of tasks, want 5", len(rows))
			}
			last := rows[0]
			if last["run_id"].(int64) != recovered || last["reason"] != "schedule" || last["previous_status"] != "failed" ||
				last["previous_run"].(int64) != failedRun {
				t.Errorf("latest run: %v", last)
			}
			if r, _ := last["due_reason"].(string); !strings.HasPrefix(r, "backoff after 1 consecutive failure(s)") {
				t.Errorf("the run after a failure is due because of %q, want the backoff", r)
			}
			if rows[4]["previous_run"] != nil || rows[4]["due_at"] == nil {
				t.Errorf("first run: %v", rows[4])
			}
		},
		"3. What did it read?": func(t *testing.T, w *world, rows []map[string]any) {
			if len(rows) != 1 {
				t.Fatalf("%d rows, want 1", len(rows))
			}
			r := rows[0]
			if r["items_seen"].(int32) != 5 || r["items_updated"].(int32) != 2 || r["items_unchanged"].(int32) != 3 ||
				r["pages"].(int32) < 1 || r["status"] != "succeeded" || r["cursor_after"] == nil {
				t.Errorf("edit run: %v", r)
			}
		},
		"4. What did it change?": func(t *testing.T, w *world, rows []map[string]any) {
			got := make([]string, len(rows))
			for i, r := range rows {
				got[i] = fmt.Sprintf("%s %s %v %v", r["record_id"], r["kind"], r["changed_fields"], r["diff"])
			}
			want := []string{
				"t-2 updated [title] map[title:map[from:Write docs to:Write better docs]]",
				"t-3 updated [status] map[status:map[from:open to:done]]",
			}
			if !slices.Equal(got, want) {
				t.Errorf("changes of the edit run:\n got %q\nwant %q", got, want)
			}
		},
		"5. Why did it fail?": func(t *testing.T, w *world, rows []map[string]any) {
			var kinds []string
			for _, r := range rows {
				err, _ := r["error"].(string)
				kinds = append(kinds, fmt.Sprintf("%s %s %v", r["kind"], r["status"], r["sink"]))
				switch {
				case r["kind"] == "sync_run" && !strings.Contains(err, "malformed JSON"):
					t.Errorf("run error %q does not say the JSON is malformed", err)
				case r["kind"] == "delivery" && r["sink"] == "hook" && !strings.Contains(err, "410 Gone"):
					t.Errorf("dead letter error %q", err)
				}
			}
			slices.Sort(kinds)
			want := []string{"delivery dead hook", "delivery retrying flaky", "sync_run failed <nil>"}
			if !slices.Equal(kinds, want) {
				t.Errorf("failures %q, want %q", kinds, want)
			}
		},
		"6. Did it notify the user?": func(t *testing.T, w *world, rows []map[string]any) {
			var got []string
			for _, r := range rows {
				got = append(got, fmt.Sprintf("%s %s %s %v %v", r["watch"], r["step"], r["decision"], r["sink"], r["status"]))
			}
			want := []string{
				// created: open notified (dedupe record), the model said
				// not urgent, closed did not match.
				"closed filter skip <nil> <nil>", "open filter notify log delivered", "urgent model skip <nil> <nil>",
				// done: closed notified three sinks.
				"closed filter notify flaky pending", "closed filter notify hook dead", "closed filter notify log delivered",
				"open filter skip <nil> <nil>", "urgent filter skip <nil> <nil>",
			}
			if !slices.Equal(got, want) {
				t.Errorf("decisions about t-3:\n got %q\nwant %q", got, want)
			}
		},
		"7. Did it run twice?": func(t *testing.T, w *world, rows []map[string]any) {
			got := map[string]int64{}
			for _, r := range rows {
				got[r["finding"].(string)] = r["count"].(int64)
				if r["verdict"] == "problem" && r["count"].(int64) != 0 {
					t.Errorf("problem %s: %d (examples %v)", r["finding"], r["count"], r["examples"])
				}
			}
			// t-2's rename and t-5's deletion matched "open" again: its
			// dedupe: record key suppressed both. The archive source's four
			// quiet runs came within seconds (the story makes every source
			// due by hand): one hour of runs more often than its interval.
			if got["duplicates_suppressed"] != 2 || got["quiet_runs_too_often"] != 1 || len(got) != 6 {
				t.Errorf("findings %v, want 6 with duplicates_suppressed 2 and quiet_runs_too_often 1", got)
			}
		},
	}

	blocks := cookbook(t)
	seen := map[string]bool{}
	for _, b := range blocks {
		sql, err := substitute(b.sql, vars)
		if err != nil {
			t.Errorf("docs/cookbook.md:%d: %v", b.line, err)
			continue
		}
		rows, err := w.query(sql)
		if err != nil {
			t.Errorf("docs/cookbook.md:%d (%s): %v\n%s", b.line, b.heading, err, sql)
			continue
		}
		if c := questions[b.heading]; c != nil {
			if seen[b.heading] {
				t.Errorf("docs/cookbook.md:%d: question %q has a second query; the cookbook promises one", b.line, b.heading)
			}
			seen[b.heading] = true
			t.Run(b.heading, func(t *testing.T) { c(t, w, rows) })
		}
	}
	for q := range questions {
		if !seen[q] {
			t.Errorf("docs/cookbook.md has no sql block under the heading %q", q)
		}
	}

	// Question 4 of the first run: created changes whose record has not
	// changed since store no snapshot, yet their diff shows the values
	// they created, like those whose record moved on.
	for _, b := range blocks {
		if b.heading != "4. What did it change?" {
			continue
		}
		sql, _ := substitute(b.sql, map[string]string{"run_id": strconv.FormatInt(created, 10)})
		rows, err := w.query(sql)
		if err != nil || len(rows) != 5 {
			t.Fatalf("changes of the first run: %d rows, %v", len(rows), err)
		}
		for _, r := range rows {
			title, _ := r["diff"].(map[string]any)["title"].(map[string]any)
			if r["kind"] != "created" || title == nil || title["from"] != nil || title["to"] == nil || title["to"] == "" {
				t.Errorf("created change of %s: kind %v, diff %v; want the created title", r["record_id"], r["kind"], r["diff"])
			}
		}
	}

	// A run that overlaps another is what question 7 is for.
	w.exec(`INSERT INTO sync_runs (source, owner, status, started_at, finished_at)
	        SELECT source, 'rogue', 'succeeded', started_at + interval '1 millisecond', finished_at
	        FROM sync_runs WHERE id = $1`, created)
	rows, err := w.query(`SELECT count FROM report_ran_twice WHERE finding = 'overlapping_runs'`)
	if err != nil || len(rows) != 1 || rows[0]["count"].(int64) != 1 {
		t.Errorf("an overlapping run: %v, %v; want count 1", rows, err)
	}
}
