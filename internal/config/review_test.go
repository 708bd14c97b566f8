package config_test

import (
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
)

const reviewSource = taskSource + `    review:
      criteria:
        - name: done
          text: The agent reports the task done.
          check: result.done == true
        - name: useful
          text: The result says what was done.
`

// A review gets its defaults once, at load.
func TestReviewDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(writeDir(t, validGlobal, reviewSource))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Sources[0].Tasks[0].Review
	if r == nil || r.Pass() != config.ReviewPassScoreDefault || r.Corrections() != config.ReviewMaxCorrectionsDefault || len(r.Criteria) != 2 {
		t.Fatalf("review %+v", r)
	}
}

// Every key of a review is checked where it is written.
func TestReviewErrors(t *testing.T) {
	t.Parallel()
	replace := func(old, new string) string {
		if !strings.Contains(reviewSource, old) {
			t.Fatalf("test bug: %q not in the source", old)
		}
		return strings.Replace(reviewSource, old, new, 1)
	}
	for _, tt := range []struct{ name, source, want string }{
		{"no criteria", replace(reviewSource[len(taskSource)+len("    review:\n"):], "      pass_score: 7\n"),
			`sources/tasks.yaml:14: tasks[0].review.criteria needs at least one criterion ({name, text})`},
		{"criterion without text", replace("          text: The result says what was done.\n", ""),
			`sources/tasks.yaml:19: tasks[0].review.criteria[1].text is required: the criterion as one sentence the result is judged against`},
		{"two criteria of one name", replace("name: useful", "name: done"),
			`sources/tasks.yaml:19: tasks[0].review.criteria[1].name "done" is used by another criterion of this review`},
		{"check that does not compile", replace("result.done == true", "result.done =="),
			`sources/tasks.yaml:18: tasks[0].review.criteria[0].check: unexpected token EOF (at 1:14)`},
		{"check over record", replace("result.done == true", `record.status == "Todo"`),
			`sources/tasks.yaml:18: tasks[0].review.criteria[0].check: unknown name record (known: result, source, task)`},
		{"pass_score past 10", replace("    review:\n", "    review:\n      pass_score: 11\n"),
			`sources/tasks.yaml:15: tasks[0].review.pass_score must be between 0 and 10, not 11`},
		{"negative max_corrections", replace("    review:\n", "    review:\n      max_corrections: -1\n"),
			`sources/tasks.yaml:15: tasks[0].review.max_corrections must be >= 0, not -1`},
		{"unknown key", replace("    review:\n", "    review:\n      pass: 3\n"),
			`sources/tasks.yaml:15: tasks[0].review.pass is not a known key (known: budget, criteria, max_corrections, model, pass_score)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(writeDir(t, validGlobal, tt.source))
			if err == nil || err.Error() != tt.want {
				t.Errorf("got  %v\nwant %s", err, tt.want)
			}
		})
	}
}
