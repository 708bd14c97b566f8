package notify

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/semantic"
)

// Summarizer has the model write the briefings of summarized digests
// (digest.summarize): the digester asks it for each summary of such a
// watch, through the model path (semantic.Briefer: cache, claim, budget,
// model_calls). The watch's settings are those the digester's Composer
// holds now: the composer follows the definitions (files and the API), so
// a summarized watch made or changed at runtime is briefed too.
type Summarizer struct {
	briefer *semantic.Briefer
	model   modelspec.Config
	logger  *slog.Logger

	mu sync.Mutex
	// watches caches the question of each watch, by watch key, for the
	// *config.Watch it was built from.
	watches map[string]*summaryWatch
}

type summaryWatch struct {
	q      *semantic.BriefQuestion
	budget config.Budget
	from   *config.Watch
}

// SummarizerFrom checks the briefing questions of cfg's digest watches
// with a summarize block; a bad model option is an error naming file, line
// and key. With a pool it also builds the model client of lookout.yaml's
// ollama block and the briefer, whose claims and model_calls rows name
// owner (hostname:pid when empty), and returns a summarizer even when no
// watch of cfg is summarized (the definitions may bring one at any time);
// without a pool it only checks (the check command) and returns nil when
// no digest is summarized.
func SummarizerFrom(pool *pgxpool.Pool, cfg *config.Config, owner string, m *metrics.Metrics, logger *slog.Logger) (*Summarizer, error) {
	return summarizerFrom(pool, cfg, modelspec.FromConfig(cfg.Global.Ollama), owner, m, logger)
}

// summarizerFrom is SummarizerFrom with the model settings mc, those of
// cfg's ollama block: tests set their clock there (mc.Now, the day of the
// watches' budgets).
func summarizerFrom(pool *pgxpool.Pool, cfg *config.Config, mc modelspec.Config, owner string, m *metrics.Metrics, logger *slog.Logger) (*Summarizer, error) {
	s := &Summarizer{watches: map[string]*summaryWatch{}, model: mc, logger: logger.With("component", "digester")}
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
			s.watches[watchKey(src.Name, w.Name)] = newSummaryWatch(q, w)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if pool == nil {
		if len(s.watches) == 0 {
			return nil, nil
		}
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

func newSummaryWatch(q *semantic.BriefQuestion, w *config.Watch) *summaryWatch {
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
	q, err := semantic.NewBriefQuestion(s.model, w.Digest.Summarize)
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
