// Package watchspec compiles a watch: its `when` expression type-checked
// against its source's record shape (normalize.CompileWhen), the model
// settings and prompt of its ask (modelspec.NewQuestion), and, in Check,
// the templates and digest schedules of the sinks and watches
// (notify.NewComposer) and the briefing questions of summarized digests.
//
// It is the one compile step of a watch: the evaluator runs the watches
// Compile returns, and the validation path of definitions (`evaluator
// check` on a file, the api's control.NewValidator on a definition made
// through HTTP or MCP) refuses what Check refuses, so neither needs the
// other. It touches no database and calls no model.
package watchspec

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/sourcegraph/conc/iter"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/intern"
	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/notify"
)

// Watch is a compiled config.Watch.
type Watch struct {
	// Config is the watch's parsed definition.
	Config *config.Watch
	// Source is the name of the watch's source.
	Source string
	// When is the watch's condition, compiled and type-checked against
	// the source's record shape by normalize.CompileWhen (the check
	// config.Load runs too).
	When *normalize.Condition
	// Owner is the user the watch belongs to ("" for the operator's).
	Owner string
	// Question is the model step of a watch with an ask; nil without.
	Question *modelspec.Question

	// reasons are Filter's reasons, shared by the watches of one
	// condition text; nil on a Watch not built by Compile.
	reasons *whenReasons
}

// whenReasons are Filter's reasons for one condition text: when it holds
// and when it does not. Every decision of a drain carries one, and
// quoting the condition for each was a tenth of the evaluator's CPU in a
// backlog (docs/benchmarks.md, (4) on branch eval-cpu); built for each
// watch by Compile, they were two strings a watch held and a tenth of a
// start's garbage at 100,000 watches (docs/benchmarks.md, (13) on branch
// eval-start). Interned by the text: the watches of a directory copy a
// few conditions.
type whenReasons struct {
	isTrue, isFalse string
}

// reasons interns the whenReasons of a condition text.
var reasons intern.Cache[whenReasons]

// reasonsOf returns the shared reasons of the condition text when.
func reasonsOf(when string) *whenReasons {
	r, _ := reasons.Get(when, func() (*whenReasons, error) {
		return &whenReasons{isTrue: whenReason(when, true), isFalse: whenReason(when, false)}, nil
	})
	return r
}

// Compile builds watch i of src (wc, src.Watches[i] or a definition made
// through the API), owned by owner, with the model defaults of model
// (lookout.yaml's ollama block). Its errors name the file, the line and
// the key: watches[i].when, watches[i].model.options.
func Compile(src *config.Source, i int, wc *config.Watch, owner string, model modelspec.Config) (*Watch, error) {
	p, err := normalize.CompileWhen(wc.When, src.Fields.Exprs())
	if err != nil {
		var errs []error
		for _, p := range normalize.Problems(err) {
			errs = append(errs, src.Errorf(fmt.Sprintf("watches[%d].when", i), ": %v", p))
		}
		return nil, errors.Join(errs...)
	}
	w := &Watch{Config: wc, Source: src.Name, Owner: owner, When: p, reasons: reasonsOf(wc.When)}
	if wc.Ask != "" {
		if w.Question, err = modelspec.NewQuestion(model, wc); err != nil {
			return nil, src.Errorf(fmt.Sprintf("watches[%d].model.options", i), "%v", err)
		}
	}
	return w, nil
}

// Match runs the watch's condition against one change: env holds the
// variables normalize.CompileWhen declares (record, previous, change,
// source, changed).
func (w *Watch) Match(env map[string]any) (bool, error) {
	return w.When.Run(env)
}

// Filter is the deterministic step of a decision: Match, read as the
// evaluator records it: matched, the verdict (notify when the condition
// holds, skip when it does not, error when it cannot run) and the reason.
func (w *Watch) Filter(env map[string]any) (matched bool, verdict, reason string) {
	return w.filtered(w.Match(env))
}

// filtered is Filter's reading of a run of the condition.
func (w *Watch) filtered(ok bool, err error) (matched bool, verdict, reason string) {
	switch {
	case err != nil:
		return false, "error", fmt.Sprintf("when %q: %v", w.Config.When, err)
	case !ok:
		if w.reasons == nil {
			return false, "skip", whenReason(w.Config.When, false)
		}
		return false, "skip", w.reasons.isFalse
	default:
		if w.reasons == nil {
			return true, "notify", whenReason(w.Config.When, true)
		}
		return true, "notify", w.reasons.isTrue
	}
}

// whenReason is Filter's reason for a condition when that held (holds)
// or did not.
func whenReason(when string, holds bool) string {
	if holds {
		return fmt.Sprintf("when %q is true", when)
	}
	return fmt.Sprintf("when %q is false", when)
}

// Check compiles every watch of cfg (Compile, over lookout.yaml's model
// settings), the templates and digest schedules of its sinks and watches
// (notify.NewComposer) and the briefing questions of its summarized
// digests (notify.SummarizerFrom without a briefer): the watch side of
// the configuration check, as `evaluator check` runs it on a directory
// and definitions.Validator on a definition made through the API. It
// returns every error, joined.
func Check(cfg *config.Config) error {
	model := modelspec.FromConfig(cfg.Global.Ollama)
	// Each source's watches on every core (a daemon's start checks them
	// all, docs/benchmarks.md (13)); the errors in the sources' order.
	bySource := make([][]error, len(cfg.Sources))
	iter.ForEachIdx(bySource, func(s int, serrs *[]error) {
		src := cfg.Sources[s]
		for i, wc := range src.Watches {
			if _, err := Compile(src, i, wc, "", model); err != nil {
				*serrs = append(*serrs, err)
			}
		}
	})
	var errs []error
	for _, serrs := range bySource {
		errs = append(errs, serrs...)
	}
	if _, err := notify.NewComposer(cfg.Global.Sinks, cfg.Sources); err != nil {
		errs = append(errs, err)
	}
	if _, err := notify.SummarizerFrom(cfg, nil, slog.New(slog.DiscardHandler)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
