package evaluator

import (
	"context"
	"fmt"
	"strings"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/replay"
	"github.com/lookout-dev/lookout/internal/semantic"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// Replay re-evaluates the stored changes q selects against the current
// watches (replay.Run), without writing evaluations or notifications and
// without delivering anything. Model steps use the verdict cache, and
// (unless q.NoModel) call the model through the evaluator's judge: those
// calls are recorded in model_calls with purpose 'replay' (not counted
// against budgets) and their verdicts cached.
func (e *Evaluator) Replay(ctx context.Context, q replay.Query) (*replay.Report, error) {
	var srcs []replay.Source
	e.index.each(func(name string, ws []*watchspec.Watch) {
		srcs = append(srcs, replay.Source{Name: name, Volatile: e.index.volatile(name), Watches: ws})
	})
	return replay.Run(ctx, e.pool, srcs, q, e.model())
}

// DryRun answers a dry run request of the api (replay.Worker): the one
// watch of r.Definition, compiled with the evaluator's model settings,
// replayed over r's window with the model, at most r.MaxCalls calls. The
// definition is read over g, the evaluator's lookout.yaml, as the
// definitions it follows are (sealed credentials stay sealed).
func (e *Evaluator) DryRun(ctx context.Context, r *replay.Request, g *config.Global) (*replay.Report, error) {
	src, err := config.ParseSource(fmt.Sprintf("dry run request %d", r.ID), r.Definition, g)
	if err != nil {
		return nil, err
	}
	if len(src.Watches) != 1 || src.Name != r.Source || src.Watches[0].Name != r.Watch {
		return nil, fmt.Errorf("dry run request %d: the definition holds no watch %s/%s alone", r.ID, r.Source, r.Watch)
	}
	w, err := e.compile(src, 0, src.Watches[0], r.Owner)
	if err != nil {
		return nil, err
	}
	srcs := []replay.Source{{Name: src.Name, Volatile: src.Volatile, Watches: []*watchspec.Watch{w}}}
	q := replay.Query{Since: r.Since, Until: r.Until, Source: r.Source, Watch: r.Watch, MaxCalls: r.MaxCalls}
	return replay.Run(ctx, e.pool, srcs, q, e.model())
}

// DryRuns returns the worker that answers the api's dry runs with the
// model in this evaluator (replay.Worker over DryRun), reading their
// definitions over g.
func (e *Evaluator) DryRuns(g *config.Global) *replay.Worker {
	return replay.NewWorker(e.pool, e.conf.Owner, func(ctx context.Context, r *replay.Request) (*replay.Report, error) {
		return e.DryRun(ctx, r, g)
	}, e.logger)
}

// model is the evaluator's judge as a replay's Model; nil without one.
func (e *Evaluator) model() replay.Model {
	if e.judge == nil {
		return nil
	}
	return judgeModel{e.judge}
}

// judgeModel answers a replay's model steps through semantic's judge,
// with purpose replay (no budget; the replay's call limit).
type judgeModel struct{ judge *semantic.Judge }

func (m judgeModel) Judge(ctx context.Context, asks []replay.Ask, maxCalls int) ([]replay.Answer, error) {
	reqs := make([]*semantic.Request, len(asks))
	for i, a := range asks {
		reqs[i] = &semantic.Request{ChangeID: a.ChangeID, Source: a.Source, RecordID: a.RecordID, Watch: a.Watch, Owner: a.Owner,
			ContentHash: a.ContentHash, Question: a.Question, Input: a.Input, Budget: a.Budget}
	}
	results, err := m.judge.Judge(ctx, reqs, semantic.Options{Purpose: semantic.PurposeReplay, MaxCalls: maxCalls})
	if err != nil {
		return nil, err
	}
	out := make([]replay.Answer, len(results))
	for i, r := range results {
		a := replay.Answer{Step: r.Step, Err: r.Err, Calls: r.Calls}
		if v := r.Verdict; v != nil {
			a.Verdict = &replay.Verdict{ShouldNotify: v.ShouldNotify, Urgency: v.Urgency, Confidence: v.Confidence, Reason: v.Reason}
		}
		a.Limit = r.Step == semantic.StepBudget && maxCalls > 0 && r.Err != nil && strings.HasPrefix(r.Err.Error(), "call limit")
		out[i] = a
	}
	return out, nil
}

var _ replay.Model = judgeModel{}
