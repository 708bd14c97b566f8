package control

import (
	"context"
	"time"

	"github.com/lookout-dev/lookout/internal/drift"
)

// ModelDriftQuery selects report_model_drift's watches and weeks.
type ModelDriftQuery struct {
	// Source and Watch narrow the report; "" is every one.
	Source, Watch string
	// Weeks is how many weeks, the current one last. Defaults to 12.
	Weeks int
	// Now places the current week. Defaults to time.Now.
	Now time.Time
}

// ModelDrift is report_model_drift's answer.
type ModelDrift struct {
	Enabled    bool                `json:"enabled" doc:"Whether ollama.drift is set in lookout.yaml: without it no reason is embedded and watches is empty."`
	EmbedModel string              `json:"embed_model,omitempty" doc:"The embedding model (ollama.drift.embed_model)."`
	Threshold  float64             `json:"threshold,omitempty" doc:"The distance above which a week drifted (ollama.drift.threshold)."`
	MinSamples int                 `json:"min_samples,omitempty" doc:"The embeddings a week needs to be compared (ollama.drift.min_samples)."`
	Queue      *drift.Queue        `json:"queue,omitempty" doc:"The embedding queue over every watch (admins only)."`
	Watches    []drift.WatchReport `json:"watches" doc:"One report per watch with embedded decisions in the weeks, by source and watch."`
}

// ModelDrift reports the drift of the model's decisions of p's watches
// (every watch for an admin), week by week against a baseline week: the
// one function behind report_model_drift over HTTP and MCP and the admin
// page's drift chart.
func (s *Service) ModelDrift(ctx context.Context, p Principal, q ModelDriftQuery) (*ModelDrift, error) {
	if q.Weeks != 0 && (q.Weeks < 1 || q.Weeks > drift.WeeksMax) {
		return nil, InvalidParameter("weeks", q.Weeks, "weeks must be between 1 and 104")
	}
	out := &ModelDrift{Watches: []drift.WatchReport{}}
	d := s.conf.Drift
	if d == nil {
		return out, nil
	}
	set := drift.SettingsOf(d)
	out.Enabled, out.EmbedModel, out.Threshold, out.MinSamples = true, set.EmbedModel, set.Threshold, set.MinSamples
	if p.Admin {
		st, err := drift.QueueState(ctx, s.pool)
		if err != nil {
			return nil, err
		}
		out.Queue = &st
	}
	reports, err := drift.Report(ctx, s.pool, set, drift.ReportQuery{Source: q.Source, Watch: q.Watch, Owner: p.listOwner(), Weeks: q.Weeks, Now: q.Now})
	if err != nil {
		return nil, err
	}
	if reports != nil {
		out.Watches = reports
	}
	return out, nil
}
