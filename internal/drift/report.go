package drift

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/config"
)

// Report limits.
const (
	WeeksDefault = 12
	WeeksMax     = 104
)

// ReportQuery selects the watches and weeks of a report.
type ReportQuery struct {
	// Source and Watch narrow the report to one source or one watch; ""
	// is every one.
	Source, Watch string
	// Owner narrows the report to one owner's watches; "" is everyone's
	// (an admin).
	Owner string
	// Weeks is how many weeks, the current one included. Defaults to 12.
	Weeks int
	// Now places the current week. Defaults to time.Now.
	Now time.Time
}

// Settings are the comparison's settings: Config's EmbedModel, Baseline,
// Threshold and MinSamples (the api builds them from lookout.yaml too).
type Settings struct {
	EmbedModel string
	Baseline   time.Time
	Threshold  float64
	MinSamples int
}

func (c Config) settings() Settings {
	return Settings{EmbedModel: c.EmbedModel, Baseline: c.Baseline, Threshold: c.Threshold, MinSamples: max(c.MinSamples, 1)}
}

// WatchReport is the drift of one watch, week by week.
type WatchReport struct {
	Source string `json:"source" doc:"The watch's source."`
	Watch  string `json:"watch" doc:"The watch (or task review) whose model decisions these are."`
	Owner  string `json:"owner" doc:"The watch's owner; empty for an operator's file."`
	// BaselineWeek is the Monday (UTC) of the baseline week; nil when no
	// week has enough embeddings yet.
	BaselineWeek   *time.Time `json:"baseline_week,omitempty" doc:"The Monday (00:00 UTC) of the week every other week is compared with: ollama.drift.baseline_week, else the watch's first week with min_samples embeddings. Absent while no week has enough."`
	BaselineSpread *float64   `json:"baseline_spread,omitempty" doc:"The baseline week's spread (see weeks[].spread)."`
	Threshold      float64    `json:"threshold" doc:"ollama.drift.threshold: a week whose distance passes it drifted."`
	Weeks          []Week     `json:"weeks" doc:"The weeks, oldest first, the current one last."`
}

// Week is one week of a watch's report.
type Week struct {
	Start    time.Time `json:"week" doc:"The week's Monday, 00:00 UTC."`
	Embedded int       `json:"embedded" doc:"Decisions of the week whose reason is embedded."`
	// Distance is the cosine distance between the week's centroid and the
	// baseline's: nil when either has fewer than min_samples embeddings.
	Distance *float64 `json:"distance,omitempty" doc:"Cosine distance (0 same direction, 1 orthogonal, 2 opposite) between the centroid of the week's reason embeddings and the baseline week's. Absent when the week or the baseline has fewer than min_samples embeddings."`
	// Spread is 1 − |mean of the unit vectors|: the mean cosine distance of
	// the week's embeddings to their centroid's direction.
	Spread       *float64        `json:"spread,omitempty" doc:"The week's spread: the mean cosine distance of its embeddings to their centroid (0 when every reason says the same thing). Absent with fewer than min_samples embeddings."`
	Baseline     bool            `json:"baseline" doc:"This is the baseline week."`
	Drifted      bool            `json:"drifted" doc:"distance passed the threshold: an alert was (or will be) sent for this watch and week."`
	Judged       int             `json:"judged" doc:"Model-judged evaluations of the week (steps model and cache), as report_model_drift counts them."`
	Notify       int             `json:"notify" doc:"Of the judged, those whose decision was notify."`
	NotifyRate   *float64        `json:"notify_rate,omitempty" doc:"notify / judged; absent when judged is 0."`
	ModelChanges []VersionChange `json:"model_changes" doc:"Digest changes of the watch's models or of the embedding model during the week."`
}

// VersionChange is a model's digest change (a row of model_versions that
// follows another).
type VersionChange struct {
	Model string    `json:"model" doc:"The model name."`
	From  string    `json:"from" doc:"The digest before."`
	To    string    `json:"to" doc:"The digest after, as /api/tags reported it."`
	At    time.Time `json:"at" doc:"The first call seen with the new digest."`
}

// centroid accumulates the unit vectors of a week.
type centroid struct {
	sum []float64
	n   int
}

func (c *centroid) add(v []float32) {
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	if norm == 0 {
		return
	}
	norm = math.Sqrt(norm)
	if c.sum == nil {
		c.sum = make([]float64, len(v))
	}
	if len(v) != len(c.sum) {
		return // another embedding model's size: not comparable
	}
	for i, x := range v {
		c.sum[i] += float64(x) / norm
	}
	c.n++
}

// mean returns the mean of the unit vectors and its length.
func (c *centroid) mean() ([]float64, float64) {
	m := make([]float64, len(c.sum))
	var l float64
	for i, x := range c.sum {
		m[i] = x / float64(c.n)
		l += m[i] * m[i]
	}
	return m, math.Sqrt(l)
}

// Spread is 1 − |mean unit vector|, which equals the mean of 1 − cos(v,
// ĉ) over the vectors v and the centroid's direction ĉ.
func (c *centroid) spread() float64 {
	_, l := c.mean()
	return 1 - l
}

// Distance is the cosine distance between two centroids.
func Distance(a, b []float64) float64 {
	var dot, na, nb float64
	for i := range a {
		if i >= len(b) {
			break
		}
		dot += a[i] * b[i]
		na += a[i] * a[i]
		nb += b[i] * b[i]
	}
	if na == 0 || nb == 0 || len(a) != len(b) {
		return math.NaN()
	}
	return 1 - dot/math.Sqrt(na*nb)
}

// Report computes the drift of the watches q selects over q.Weeks weeks
// (the current one last), reading q's embeddings of s.EmbedModel.
func Report(ctx context.Context, db Querier, s Settings, q ReportQuery) ([]WatchReport, error) {
	if q.Weeks == 0 {
		q.Weeks = WeeksDefault
	}
	if q.Weeks < 1 || q.Weeks > WeeksMax {
		return nil, fmt.Errorf("weeks must be between 1 and %d, not %d", WeeksMax, q.Weeks)
	}
	if q.Now.IsZero() {
		q.Now = time.Now()
	}
	s.MinSamples = max(s.MinSamples, 1)
	end := config.WeekStart(q.Now).AddDate(0, 0, 7)
	from := end.AddDate(0, 0, -7*q.Weeks)
	rows, err := db.Query(ctx, queryWatches, s.EmbedModel, from, end, q.Source, q.Watch, q.Owner)
	if err != nil {
		return nil, fmt.Errorf("list the watches with embeddings: %w", err)
	}
	var out []WatchReport
	for rows.Next() {
		var r WatchReport
		if err := rows.Scan(&r.Source, &r.Watch, &r.Owner); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list the watches with embeddings: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the watches with embeddings: %w", err)
	}
	for i := range out {
		if err := watchReport(ctx, db, s, &out[i], from, end); err != nil {
			return nil, fmt.Errorf("drift of %s/%s: %w", out[i].Source, out[i].Watch, err)
		}
	}
	return out, nil
}

func watchReport(ctx context.Context, db Querier, s Settings, r *WatchReport, from, end time.Time) error {
	r.Threshold = s.Threshold
	base := s.Baseline
	if base.IsZero() {
		err := db.QueryRow(ctx, queryFirstWeek, r.Source, r.Watch, s.EmbedModel, s.MinSamples).Scan(&base)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("find the baseline week: %w", err)
		}
		base = base.UTC()
	}
	weeks := map[time.Time]*centroid{}
	read := func(lo, hi time.Time) error {
		rows, err := db.Query(ctx, queryVectors, r.Source, r.Watch, s.EmbedModel, lo, hi)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var w time.Time
			var v []float32
			if err := rows.Scan(&w, &v); err != nil {
				return err
			}
			w = w.UTC()
			c := weeks[w]
			if c == nil {
				c = &centroid{}
				weeks[w] = c
			}
			c.add(v)
		}
		return rows.Err()
	}
	if err := read(from, end); err != nil {
		return fmt.Errorf("read embeddings: %w", err)
	}
	if !base.IsZero() && (base.Before(from) || !base.Before(end)) {
		if err := read(base, base.AddDate(0, 0, 7)); err != nil {
			return fmt.Errorf("read the baseline's embeddings: %w", err)
		}
	}
	var baseMean []float64
	if c := weeks[base]; !base.IsZero() && c != nil && c.n >= s.MinSamples {
		b := base
		r.BaselineWeek = &b
		sp := c.spread()
		r.BaselineSpread = &sp
		baseMean, _ = c.mean()
	}
	rates := map[time.Time][2]int{}
	rows, err := db.Query(ctx, queryRates, r.Source, r.Watch, from, end)
	if err != nil {
		return fmt.Errorf("read the decisions' rates: %w", err)
	}
	for rows.Next() {
		var w time.Time
		var judged, notify int
		if err := rows.Scan(&w, &judged, &notify); err != nil {
			rows.Close()
			return fmt.Errorf("read the decisions' rates: %w", err)
		}
		rates[w.UTC()] = [2]int{judged, notify}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the decisions' rates: %w", err)
	}
	changes := map[time.Time][]VersionChange{}
	rows, err = db.Query(ctx, queryVersionChanges, s.EmbedModel, from, end, r.Source, r.Watch)
	if err != nil {
		return fmt.Errorf("read model versions: %w", err)
	}
	for rows.Next() {
		var v VersionChange
		if err := rows.Scan(&v.Model, &v.From, &v.To, &v.At); err != nil {
			rows.Close()
			return fmt.Errorf("read model versions: %w", err)
		}
		v.At = v.At.UTC()
		w := config.WeekStart(v.At)
		changes[w] = append(changes[w], v)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read model versions: %w", err)
	}
	for w := from; w.Before(end); w = w.AddDate(0, 0, 7) {
		wk := Week{Start: w, Baseline: r.BaselineWeek != nil && w.Equal(base), ModelChanges: changes[w]}
		if wk.ModelChanges == nil {
			wk.ModelChanges = []VersionChange{}
		}
		if c := weeks[w]; c != nil {
			wk.Embedded = c.n
			if c.n >= s.MinSamples {
				sp := c.spread()
				wk.Spread = &sp
				if baseMean != nil {
					m, _ := c.mean()
					if d := Distance(m, baseMean); !math.IsNaN(d) {
						d = max(d, 0) // rounding below 0 for the same direction
						wk.Distance = &d
						wk.Drifted = d > s.Threshold
					}
				}
			}
		}
		if rt := rates[w]; rt[0] > 0 {
			wk.Judged, wk.Notify = rt[0], rt[1]
			rate := float64(rt[1]) / float64(rt[0])
			wk.NotifyRate = &rate
		}
		r.Weeks = append(r.Weeks, wk)
	}
	return nil
}

// SettingsOf returns the comparison's settings of an ollama.drift block
// (defaulted by the config loader); nil is drift off.
func SettingsOf(d *config.Drift) Settings {
	if d == nil {
		return Settings{}
	}
	return Settings{EmbedModel: d.EmbedModel, Baseline: d.Baseline(), Threshold: d.Threshold, MinSamples: max(d.MinSamples, 1)}
}
