package notify

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/semantic"
)

// Summarizer has the model write the briefings of summarized digests
// (digest.summarize): the digester asks it for each summary of such a
// watch, through the model path (semantic.Briefer: cache, claim, budget,
// model_calls).
type Summarizer struct {
	briefer *semantic.Briefer
	watches map[string]*summaryWatch
}

type summaryWatch struct {
	q      *semantic.BriefQuestion
	budget config.Budget
}

// SummarizerFrom builds the briefing questions of cfg's digest watches
// with a summarize block; a bad model option is an error naming file, line
// and key. With a pool it also builds the model client of lookout.yaml's
// ollama block and the briefer, whose claims and model_calls rows name
// owner (hostname:pid when empty); without one it only checks (the check
// command). It returns nil when no digest is summarized.
func SummarizerFrom(pool *pgxpool.Pool, cfg *config.Config, owner string, m *metrics.Metrics, logger *slog.Logger) (*Summarizer, error) {
	mc := semantic.FromConfig(cfg.Global.Ollama)
	s := &Summarizer{watches: map[string]*summaryWatch{}}
	var errs []error
	for _, src := range cfg.Sources {
		for i, w := range src.Watches {
			if w == nil || w.Digest == nil || w.Digest.Summarize == nil {
				continue
			}
			q, err := semantic.NewBriefQuestion(mc, w.Digest.Summarize)
			if err != nil {
				errs = append(errs, src.Errorf(fmt.Sprintf("watches[%d].digest.summarize.model.options", i), "%v", err))
				continue
			}
			sw := &summaryWatch{q: q}
			if w.Budget != nil {
				sw.budget = *w.Budget
			}
			s.watches[watchKey(src.Name, w.Name)] = sw
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(s.watches) == 0 {
		return nil, nil
	}
	if pool == nil {
		return s, nil
	}
	client, err := semantic.NewClient(mc, logger)
	if err != nil {
		return nil, err
	}
	if owner == "" {
		host, _ := os.Hostname()
		owner = fmt.Sprintf("%s:%d", cmp.Or(host, "evaluator"), os.Getpid())
	}
	s.briefer = semantic.NewBriefer(pool, client, owner, logger)
	s.briefer.SetMetrics(m)
	return s, nil
}

// Briefer returns the briefer (nil when built without a pool).
func (s *Summarizer) Briefer() *semantic.Briefer {
	if s == nil {
		return nil
	}
	return s.briefer
}

// watch returns the summarize settings of source's watch, nil when its
// digest is not summarized.
func (s *Summarizer) watch(source, watch string) *summaryWatch {
	if s == nil || s.briefer == nil {
		return nil
	}
	return s.watches[watchKey(source, watch)]
}

// briefItems picks the items shown to the model: the most urgent first,
// then the oldest, at most max.
func briefItems(items []DigestItem, max int) []semantic.BriefItem {
	order := slices.Clone(items)
	slices.SortStableFunc(order, func(a, b DigestItem) int {
		return urgencyRank[b.Verdict.Urgency] - urgencyRank[a.Verdict.Urgency]
	})
	order = order[:min(len(order), max)]
	out := make([]semantic.BriefItem, len(order))
	for i, it := range order {
		out[i] = semantic.BriefItem{RecordID: it.Record.ID, Title: it.Record.Title, URL: it.Record.URL,
			Author: it.Record.Author, Labels: it.Record.Labels, Body: it.Record.Body, Kind: it.Change.Kind,
			Version: it.Change.Version, Urgency: it.Verdict.Urgency, Reason: it.Verdict.Reason}
	}
	return out
}
