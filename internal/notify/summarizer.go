package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/modelspec"
)

// Briefer writes the briefing of one digest: the model path
// (semantic.Briefer: cache, claim, budget, model_calls), which the
// evaluator gives the digester (evaluator.NewBriefer). notify links no
// model client: the api, which links notify for its sinks, does not link
// the model through it.
type Briefer interface {
	// Brief returns the briefing of r, or why it is missing (Missing) or
	// that another replica is writing it (Busy); the error is a database
	// failure or ctx's end, after which the digest may be tried again.
	Brief(ctx context.Context, r *modelspec.BriefRequest) (modelspec.BriefResult, error)
}

// Summarizer has the model write the briefings of summarized digests
// (digest.summarize): the digester asks it for each summary of such a
// watch, and it asks its Briefer. The watch's settings are those the
// digester's Composer holds now: the composer follows the definitions
// (files and the API), so a summarized watch made or changed at runtime
// is briefed too.
type Summarizer struct {
	briefer Briefer
	model   modelspec.Config
	logger  *slog.Logger

	mu sync.Mutex
	// watches caches the question of each watch, by watch key, for the
	// *config.Watch it was built from.
	watches map[string]*summaryWatch
}

type summaryWatch struct {
	q      *modelspec.BriefQuestion
	budget config.Budget
	from   *config.Watch
}

// SummarizerFrom checks the briefing questions of cfg's digest watches
// with a summarize block over lookout.yaml's ollama block; a bad model
// option is an error naming file, line and key. With a briefer it returns
// a summarizer that has b write the briefings, even when no watch of cfg
// is summarized (the definitions may bring one at any time); without one
// it only checks (the check command, watchspec.Check) and returns nil when
// no digest is summarized.
func SummarizerFrom(cfg *config.Config, b Briefer, logger *slog.Logger) (*Summarizer, error) {
	s := &Summarizer{watches: map[string]*summaryWatch{}, model: modelspec.FromConfig(cfg.Global.Ollama),
		briefer: b, logger: logger.With("component", "digester")}
	var errs []error
	for _, src := range cfg.Sources {
		for i, w := range src.Watches {
			if w == nil || w.Digest == nil || w.Digest.Summarize == nil {
				continue
			}
			q, err := modelspec.NewBriefQuestion(s.model, w.Digest.Summarize)
			if err != nil {
				errs = append(errs, src.Errorf(fmt.Sprintf("watches[%d].digest.summarize.model.options", i), "%v", err))
				continue
			}
			s.watches[watchKey(src.Name, w.Name)] = newSummaryWatch(q, w)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if b == nil && len(s.watches) == 0 {
		return nil, nil
	}
	return s, nil
}

func newSummaryWatch(q *modelspec.BriefQuestion, w *config.Watch) *summaryWatch {
	sw := &summaryWatch{q: q, from: w}
	if w.Budget != nil {
		sw.budget = *w.Budget
	}
	return sw
}

// watch returns the summarize settings of source's watch as c holds it
// now, nil when its digest is not summarized (or the watch is gone).
func (s *Summarizer) watch(c *Composer, source, watch string) *summaryWatch {
	if s == nil || s.briefer == nil {
		return nil
	}
	wt := c.watch(source, watch)
	if wt == nil || wt.cfg == nil || wt.cfg.Digest == nil || wt.cfg.Digest.Summarize == nil {
		return nil
	}
	w, key := wt.cfg, watchKey(source, watch)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sw := s.watches[key]; sw != nil && sw.from == w {
		return sw
	}
	q, err := modelspec.NewBriefQuestion(s.model, w.Digest.Summarize)
	if err != nil {
		// The validation path refuses such a definition; one that slips
		// through goes out without a briefing.
		s.logger.Error("digest briefing question refused", "source", source, "watch", watch, "error", err)
		return nil
	}
	sw := newSummaryWatch(q, w)
	s.watches[key] = sw
	return sw
}

// briefItems picks the items shown to the model: the most urgent first,
// then the oldest, at most max.
func briefItems(items []DigestItem, max int) []modelspec.BriefItem {
	order := slices.Clone(items)
	slices.SortStableFunc(order, func(a, b DigestItem) int {
		return urgencyRank[b.Verdict.Urgency] - urgencyRank[a.Verdict.Urgency]
	})
	order = order[:min(len(order), max)]
	out := make([]modelspec.BriefItem, len(order))
	for i, it := range order {
		out[i] = modelspec.BriefItem{RecordID: it.Record.ID, Title: it.Record.Title, URL: it.Record.URL,
			Author: it.Record.Author, Labels: it.Record.Labels, Body: it.Record.Body, Kind: it.Change.Kind,
			Version: it.Change.Version, Urgency: it.Verdict.Urgency, Reason: it.Verdict.Reason}
	}
	return out
}
