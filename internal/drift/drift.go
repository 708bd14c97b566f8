// Package drift watches the model itself: the reason of every model
// decision (a watch's verdict, a task review's score) is embedded through
// Ollama's /api/embed, and each watch's weeks are compared with a
// baseline week (docs/semantic.md, "Drift of model outputs"). It owns
// drift_embeddings — a claimable queue of reasons copied from
// model_calls, so that a decision is never delayed by, nor lost to, an
// embedding model that is down — and model_versions, a row each time the
// digest Ollama reports for a model name changes.
//
// The Service runs in the evaluator deployment; Report is read by the
// api (report_model_drift) and the admin page. Drift never calls the chat
// model and links no Ollama client: the evaluator binary gives it one
// (Embedder).
package drift

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/service"
)

// Embedder embeds texts and reports model digests: semantic.Client in
// the evaluator, a fake in tests.
type Embedder interface {
	// Embed returns one vector per input, in order, or an error (the
	// server down, the model missing) after which nothing is stored.
	Embed(ctx context.Context, model string, inputs []string, timeout time.Duration) ([][]float32, error)
	// Digest returns the digest the server reports for model.
	Digest(ctx context.Context, model string, timeout time.Duration) (string, error)
}

// Defaults of Config's internal settings.
const (
	// FeedLookback is how far before the newest queued decision the feed
	// looks again for model calls that committed late.
	FeedLookback = 10 * time.Minute
	// LeaseDefault is how long a claimed batch stays with its replica.
	LeaseDefault = 5 * time.Minute
	// HoldMin and HoldMax bound the wait before a batch the embedding
	// model failed is tried again (doubling per attempt of its rows).
	HoldMin = 30 * time.Second
	HoldMax = 15 * time.Minute
	// MaxBatchesPerPass bounds the batches one pass embeds, so that a
	// large backlog is worked through across passes.
	MaxBatchesPerPass = 20
	// CheckEvery is how often a pass that embedded nothing checks the
	// weeks for drift.
	CheckEvery = time.Hour
)

// Config is the drift service's own configuration (lookout.yaml's
// ollama.drift, through FromConfig).
type Config struct {
	// EmbedModel is the embedding model. Required.
	EmbedModel string
	// Baseline pins the baseline week (its Monday 00:00 UTC). Defaults to
	// each watch's first week with MinSamples embeddings.
	Baseline time.Time
	// Threshold is the centroid distance above which a week drifted.
	// Required (> 0).
	Threshold float64
	// MinSamples is the embeddings a week needs to be compared. Defaults to 1.
	MinSamples int
	// Batch is the inputs of one /api/embed request. Defaults to 32.
	Batch int
	// Every is the interval between passes. Defaults to 1m.
	Every time.Duration
	// Timeout bounds one /api/embed request. Defaults to 30s.
	Timeout time.Duration
	// Notify lists the sinks drift alerts go to; none: no alert is sent
	// (the report still shows the drift). Defaults to none.
	Notify []string
	// Owner names the replica in claims. Defaults to "drift".
	Owner string
	// Lease is how long a claim lasts. Defaults to LeaseDefault.
	Lease time.Duration
	// Hold spaces the retries of a batch the model failed. Defaults to
	// HoldMin..HoldMax.
	Hold service.Backoff
	// OnPass, when set, is called after every pass of the running service
	// with its result (tests wait on it).
	OnPass func(PassResult, error)
	// Now is the clock of the weeks checked for alerts. Defaults to time.Now.
	Now func() time.Time
}

// FromConfig returns the service's settings from lookout.yaml's
// ollama.drift block, with the loader's defaults; ok is false when the
// block is absent (drift is off).
func FromConfig(g *config.Global) (c Config, ok bool) {
	d := g.Ollama.Drift
	if d == nil {
		return Config{}, false
	}
	return Config{EmbedModel: d.EmbedModel, Baseline: d.Baseline(), Threshold: d.Threshold, MinSamples: d.MinSamples,
		Batch: d.Batch, Every: d.Every, Timeout: d.Timeout, Notify: d.Notify}, true
}

func (c Config) withDefaults() Config {
	c.MinSamples = max(c.MinSamples, 1)
	if c.Batch <= 0 {
		c.Batch = config.DriftBatchDefault
	}
	if c.Every <= 0 {
		c.Every = config.DriftEveryDefault
	}
	if c.Timeout <= 0 {
		c.Timeout = config.DriftTimeoutDefault
	}
	if c.Owner == "" {
		c.Owner = "drift"
	}
	if c.Lease <= 0 {
		c.Lease = LeaseDefault
	}
	if c.Hold.Min <= 0 || c.Hold.Max <= 0 {
		c.Hold = service.Backoff{Min: HoldMin, Max: HoldMax}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Service feeds the queue from model_calls, embeds what is pending in
// bounded batches, records model versions and sends drift alerts, every
// Config.Every, in the evaluator deployment.
type Service struct {
	pool   *pgxpool.Pool
	emb    Embedder
	conf   Config
	logger *slog.Logger
	loop   service.Loop
	// checked is the last Check of a pass (one goroutine runs passes).
	checked time.Time
}

// New returns the service; it checks the settings a caller must give.
func New(pool *pgxpool.Pool, emb Embedder, conf Config, logger *slog.Logger) (*Service, error) {
	if conf.EmbedModel == "" {
		return nil, errors.New("drift: the embedding model is required (ollama.drift.embed_model)")
	}
	if conf.Threshold <= 0 {
		return nil, fmt.Errorf("drift: threshold must be > 0, not %g (ollama.drift.threshold)", conf.Threshold)
	}
	return &Service{pool: pool, emb: emb, conf: conf.withDefaults(), logger: logger.With("component", "drift")}, nil
}

// PassResult is what one pass did.
type PassResult struct {
	// Fed is the decisions queued from model_calls.
	Fed int
	// Embedded is the decisions embedded.
	Embedded int
	// Held is the decisions given back because the embedding model failed.
	Held int
	// Versions is the model digest changes recorded.
	Versions int
	// Alerts is the drift alerts written (new dedupe keys).
	Alerts int
}

// Start runs a pass now and then every Config.Every, until Stop.
func (s *Service) Start(ctx context.Context) error { return s.loop.Start(ctx, s.run) }

// Stop stops the service and waits for a pass in progress.
func (s *Service) Stop() error { return s.loop.Stop() }

func (s *Service) run(ctx context.Context) error {
	s.logger.Info("drift started", "embed_model", s.conf.EmbedModel, "every", s.conf.Every, "threshold", s.conf.Threshold)
	t := time.NewTicker(s.conf.Every)
	defer t.Stop()
	backoff := service.LoopBackoff()
	for {
		res, err := s.Pass(ctx)
		if s.conf.OnPass != nil && ctx.Err() == nil {
			s.conf.OnPass(res, err)
		}
		if err != nil && ctx.Err() == nil {
			wait := backoff.Next()
			s.logger.Error("drift pass", "error", err, "retry_in", wait)
			if !service.RetrySleep(ctx, wait) {
				return nil
			}
			continue
		}
		backoff.Reset()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass feeds the queue, embeds up to MaxBatchesPerPass batches, and
// checks the current and the previous week of every watch for drift. An
// embedding model that fails is not an error of the pass: its batch is
// held (PassResult.Held) and tried again later.
func (s *Service) Pass(ctx context.Context) (PassResult, error) {
	var res PassResult
	var err error
	if res.Fed, res.Versions, err = s.Feed(ctx); err != nil {
		return res, err
	}
	for range MaxBatchesPerPass {
		n, held, err := s.EmbedBatch(ctx)
		if err != nil {
			return res, err
		}
		res.Embedded += n
		res.Held += held
		if n == 0 || held > 0 {
			break
		}
	}
	// The weeks change only with new embeddings (and the calendar): a
	// pass that embedded nothing checks at most hourly.
	if now := time.Now(); res.Embedded > 0 || now.Sub(s.checked) >= CheckEvery {
		if res.Alerts, err = s.Check(ctx); err != nil {
			return res, err
		}
		s.checked = now
	}
	if res.Fed+res.Embedded+res.Held+res.Versions+res.Alerts == 0 {
		s.logger.Debug("drift pass: nothing to do")
	}
	return res, nil
}
