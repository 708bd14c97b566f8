package config

import (
	"fmt"
	"strings"

	"github.com/lookout-dev/lookout/internal/normalize"
)

// Defaults of a task review (docs/tasks.md#review).
const (
	ReviewPassScoreDefault      = 7
	ReviewMaxCorrectionsDefault = 2
)

// Review is a task watch's review: after its executor succeeded, the
// evaluator scores the result against each criterion (its deterministic
// check first, then the model), and a failing review sends the task back
// for a correction, up to MaxCorrections. See docs/tasks.md#review.
type Review struct {
	// Criteria are the acceptance criteria. At least one is required.
	Criteria []*ReviewCriterion `yaml:"criteria"`
	// PassScore is the score (0–10) every criterion must reach, besides
	// passing. Defaults to 7.
	PassScore *int `yaml:"pass_score"`
	// MaxCorrections is how often a failing result is sent back before the
	// task is Failed. Defaults to 2.
	MaxCorrections *int `yaml:"max_corrections"`
	// Model overrides ollama's model, timeout and options for the review.
	// Defaults to lookout.yaml's ollama block.
	Model *WatchModel `yaml:"model"`
	// Budget bounds the review's model calls per UTC day; an exhausted
	// budget holds the review until the next UTC day. Defaults to no limit.
	Budget *Budget `yaml:"budget"`
}

// ReviewCriterion is one acceptance criterion of a review.
type ReviewCriterion struct {
	// Name identifies the criterion in the review and in LastError.
	// Required, unique within the review.
	Name string `yaml:"name"`
	// Text is the criterion as one sentence the model judges the result
	// against. Required.
	Text string `yaml:"text"`
	// Check is an optional deterministic expression over result (the
	// executor's JSON object), source and task, evaluated before the model
	// is asked: false fails the review at once, without a model call.
	// Defaults to none.
	Check string `yaml:"check"`
}

// Pass returns the review's pass score (after validation: the default
// applied).
func (r *Review) Pass() int { return *r.PassScore }

// Corrections returns the review's max corrections (after validation).
func (r *Review) Corrections() int { return *r.MaxCorrections }

// validateReview applies the defaults of the review of task watch key
// (tasks[i]) and checks it.
func (s *Source) validateReview(key string, r *Review) []error {
	if r == nil {
		return nil
	}
	key += ".review"
	var errs []error
	bad := func(k, format string, args ...any) { errs = append(errs, s.Errorf(key+k, format, args...)) }
	if len(r.Criteria) == 0 {
		bad(".criteria", "needs at least one criterion ({name, text})")
	}
	seen := map[string]bool{}
	for i, c := range r.Criteria {
		k := fmt.Sprintf(".criteria[%d]", i)
		if c == nil {
			bad(k, "is empty")
			continue
		}
		switch {
		case c.Name == "":
			bad(k+".name", "is required")
		case !nameRE.MatchString(c.Name):
			bad(k+".name", "%q is not a valid name (letters, digits, '-', '_', '.')", c.Name)
		case seen[c.Name]:
			bad(k+".name", "%q is used by another criterion of this review", c.Name)
		}
		seen[c.Name] = true
		c.Text = strings.TrimSpace(c.Text)
		if c.Text == "" {
			bad(k+".text", "is required: the criterion as one sentence the result is judged against")
		}
		c.Check = strings.TrimSpace(c.Check)
		if c.Check != "" {
			_, err := normalize.CompileReviewCheck(c.Check)
			errs = append(errs, s.exprErrors(key+k+".check", err)...)
		}
	}
	if r.PassScore == nil {
		r.PassScore = new(ReviewPassScoreDefault)
	} else if *r.PassScore < 0 || *r.PassScore > 10 {
		bad(".pass_score", "must be between 0 and 10, not %d", *r.PassScore)
	}
	if r.MaxCorrections == nil {
		r.MaxCorrections = new(ReviewMaxCorrectionsDefault)
	} else if *r.MaxCorrections < 0 {
		bad(".max_corrections", "must be >= 0, not %d", *r.MaxCorrections)
	}
	if r.Budget != nil && (r.Budget.CallsPerDay < 0 || r.Budget.TokensPerDay < 0) {
		bad(".budget", "calls_per_day and tokens_per_day must be >= 0")
	}
	if r.Model != nil && r.Model.Timeout < 0 {
		bad(".model.timeout", "must be positive")
	}
	return errs
}
