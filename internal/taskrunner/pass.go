package taskrunner

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/tasks"
)

// candidate is an eligible record of a pass.
type candidate struct {
	tasks.Candidate
	fields  map[string]any
	version string
	key     string
}

// pass claims, for each task watch of src, up to take eligible tasks in
// order, and starts their task runs. runID is the source run whose mirror
// it reads.
func (r *Runner) pass(ctx context.Context, src *source, runID int64) error {
	name := src.cfg.Name
	if v, ok := src.actor.(connectors.Verifier); ok && !src.verified.Load() {
		// The task version leaves out what the tool itself moves on an
		// edit, which the connector learns from its schema.
		if err := r.call(ctx, v.Verify); err != nil {
			return fmt.Errorf("verify %s before its pass: %w", name, err)
		}
		src.verified.Store(true)
	}
	recs, err := tasks.Candidates(ctx, r.pool, name)
	if err != nil {
		return err
	}
	for _, w := range src.watches {
		var eligible []*candidate
		for _, rec := range recs {
			fields := (&normalize.Record{ID: rec.ID, Title: rec.Title, Body: rec.Body, URL: rec.URL, Author: rec.Author,
				Status: rec.Status, Labels: rec.Labels, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, Extra: rec.Extra}).Fields()
			ok, err := w.when.Run(map[string]any{"record": fields, "source": name})
			if err != nil {
				r.logger.Warn("task when failed on a record; it is not eligible", "source", name, "task", w.cfg.Name,
					"record_id", rec.ID, "error", err)
				continue
			}
			if ok {
				eligible = append(eligible, &candidate{Candidate: rec, fields: fields})
			}
		}
		if len(eligible) == 0 {
			continue
		}
		sortCandidates(eligible, w.order)
		keys := make([]string, len(eligible))
		for i, c := range eligible {
			c.version = contentVersion(c.fields, src.cfg.Volatile, src.actor)
			c.key = fmt.Sprintf("%s:%s:v%s:%s", name, c.ID, c.version, w.cfg.Name)
			keys[i] = c.key
		}
		known, err := tasks.Lookup(ctx, r.pool, keys)
		if err != nil {
			return err
		}
		now := r.conf.Now()
		taken := 0
		for _, c := range eligible {
			if taken >= w.cfg.Take {
				break
			}
			claim := tasks.Claim{Source: name, Task: w.cfg.Name, RecordID: c.ID,
				RecordVersion: c.Version, ContentVersion: c.version, IdempotencyKey: c.key, Title: c.Title,
				SyncRunID: runID, By: r.conf.Owner, At: now, Lease: w.cfg.Lease, Executor: w.exec.kind()}
			claimTask := tasks.ClaimTask
			switch last := known[c.key]; {
			case last == nil, last.Claimable(now):
			case last.Rerunnable(c.Version):
				// A person moved the finished card back to its todo status.
				r.logger.Info("task moved back to its todo status after it "+last.Status+"; running it again",
					"source", name, "task", w.cfg.Name, "record_id", c.ID, "task_run_id", last.ID, "previous_run_id", last.RunID)
				claimTask = tasks.RerunTask
			default:
				continue // in progress, finished, or waiting for its retry
			}
			run, err := claimTask(ctx, r.pool, claim)
			if err != nil {
				return err
			}
			if run == nil {
				continue // another replica took it
			}
			taken++
			r.logger.Info("task claimed", "source", name, "task", w.cfg.Name, "record_id", c.ID, "task_run_id", run.ID,
				"run_id", run.RunID, "attempt", run.Attempt, "idempotency_key", run.IdempotencyKey,
				"claim_expires_at", run.ClaimExpiresAt.UTC())
			r.work.Add(1)
			go func() {
				defer r.work.Done()
				r.process(ctx, src, w, run, c.fields)
			}()
		}
	}
	return nil
}

// contentVersion hashes what the task says: the record without its
// status, its updated_at, the source's volatile paths and what the
// connector's task actions write (connectors.TaskContent), so that
// lookout's own writes never make a new version.
func contentVersion(fields map[string]any, volatile []string, a connectors.Actor) string {
	v, _ := normalize.Decode(normalize.Canonical(fields)) // a deep copy
	f, _ := v.(map[string]any)
	delete(f, "status")
	delete(f, "updated_at")
	extra, _ := f["extra"].(map[string]any)
	for _, p := range volatile {
		if k, ok := strings.CutPrefix(p, "extra."); ok {
			delete(extra, k)
		} else {
			delete(f, p)
		}
	}
	if tc, ok := a.(connectors.TaskContent); ok {
		tc.StripTask(f)
	}
	sum := sha256.Sum256(normalize.Canonical(f))
	return hex.EncodeToString(sum[:8])
}

// sortCandidates orders cs by the order keys; missing values sort last
// whatever the direction, the record id breaks ties.
func sortCandidates(cs []*candidate, order []config.TaskOrder) {
	slices.SortStableFunc(cs, func(a, b *candidate) int {
		for _, o := range order {
			x, y := normalize.RecordValue(a.fields, o.Field), normalize.RecordValue(b.fields, o.Field)
			switch {
			case x == nil && y == nil:
				continue
			case x == nil:
				return 1
			case y == nil:
				return -1
			}
			c := compareValues(x, y)
			if o.Desc {
				c = -c
			}
			if c != 0 {
				return c
			}
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// compareValues compares two JSON values: numbers by value, strings
// (times are RFC 3339 strings) and booleans in their order, other values
// by their JSON text; values of different kinds by kind.
func compareValues(x, y any) int {
	rank := func(v any) int {
		switch v.(type) {
		case bool:
			return 0
		case float64, int, int64:
			return 1
		case string:
			return 2
		}
		return 3
	}
	if rx, ry := rank(x), rank(y); rx != ry {
		return cmp.Compare(rx, ry)
	}
	switch a := x.(type) {
	case bool:
		b := y.(bool)
		switch {
		case a == b:
			return 0
		case !a:
			return -1
		}
		return 1
	case string:
		return cmp.Compare(a, y.(string))
	case float64, int, int64:
		return cmp.Compare(number(x), number(y))
	}
	return cmp.Compare(string(normalize.Canonical(x)), string(normalize.Canonical(y)))
}

func number(v any) float64 {
	switch n := v.(type) {
	case float64:
		return n
	case int:
		return float64(n)
	case int64:
		return float64(n)
	}
	return 0
}
