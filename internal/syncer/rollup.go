package syncer

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// rollupChunk is the most (source, hour) rows one flush statement writes.
const rollupChunk = 5000

// hourKey is a row of sync_run_hours: a source and the UTC hour its runs
// started in.
type hourKey struct {
	source string
	hour   time.Time
}

// hourCount is what a replica adds to a row of sync_run_hours.
type hourCount struct {
	runs, notModified, requests, waits int32
	items                              int64
	first, last, lastFinished          time.Time
	durationMs, latenessSum, latenessM float64
}

// rollup counts the quiet runs a replica completed, per source and hour,
// in memory, and adds them to sync_run_hours every Config.RollupEvery (and
// when the replica stops or RunDue ends). Writing the counts once per
// flush instead of once per run is what keeps a quiet run's database cost
// to its source row: with sources due every minute and the default
// five-minute flush, one row version of sync_run_hours stands for five
// runs (docs/scaling.md). The price is that the counts of the last flush
// period are lost if the process is killed; the runs themselves are not
// (their source rows are committed), and a replica that stops cleanly
// flushes first.
type rollup struct {
	mu sync.Mutex
	m  map[hourKey]*hourCount
}

// merge adds o's counts to c's.
func (c *hourCount) merge(o *hourCount) {
	c.runs += o.runs
	c.notModified += o.notModified
	c.requests += o.requests
	c.waits += o.waits
	c.items += o.items
	if o.first.Before(c.first) {
		c.first = o.first
	}
	if o.last.After(c.last) {
		c.last = o.last
	}
	if o.lastFinished.After(c.lastFinished) {
		c.lastFinished = o.lastFinished
	}
	c.durationMs += o.durationMs
	c.latenessSum += o.latenessSum
	c.latenessM = max(c.latenessM, o.latenessM)
}

// add counts one quiet run whose completion committed.
func (r *rollup) add(q quietRun) {
	late := q.c.lateness.Seconds()
	one := &hourCount{runs: 1, requests: int32(q.requests), waits: int32(q.waits), items: int64(q.seen),
		first: q.c.startedAt, last: q.c.startedAt, lastFinished: q.finishedAt,
		durationMs: float64(q.finishedAt.Sub(q.c.startedAt).Microseconds()) / 1000, latenessSum: late, latenessM: late}
	if q.notModified {
		one.notModified = 1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.putLocked(hourKey{source: q.c.name, hour: q.c.startedAt.UTC().Truncate(time.Hour)}, one)
}

// putLocked adds c to the counts of k; r.mu is held.
func (r *rollup) putLocked(k hourKey, c *hourCount) {
	if r.m == nil {
		r.m = map[hourKey]*hourCount{}
	}
	if o := r.m[k]; o != nil {
		o.merge(c)
	} else {
		r.m[k] = c
	}
}

// take empties the rollup and returns what it held.
func (r *rollup) take() map[hourKey]*hourCount {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.m
	r.m = nil
	return m
}

// restore adds back counts a flush could not write, to be written by the
// next one.
func (r *rollup) restore(m map[hourKey]*hourCount) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range m {
		r.putLocked(k, c)
	}
}

// flushRollup adds the counted quiet runs to sync_run_hours, in statements
// of up to rollupChunk rows in (source, hour) order. What a statement
// could not write is kept for the next flush.
func (s *Syncer) flushRollup(ctx context.Context) error {
	m := s.hours.take()
	if len(m) == 0 {
		return nil
	}
	keys := make([]hourKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b hourKey) int {
		return cmp.Or(cmp.Compare(a.source, b.source), a.hour.Compare(b.hour))
	})
	for start := 0; start < len(keys); start += rollupChunk {
		chunk := keys[start:min(start+rollupChunk, len(keys))]
		if err := s.writeHours(ctx, chunk, m); err != nil {
			left := make(map[hourKey]*hourCount, len(keys)-start)
			for _, k := range keys[start:] {
				left[k] = m[k]
			}
			s.hours.restore(left)
			return fmt.Errorf("add %d source-hours of quiet runs to sync_run_hours: %w", len(left), err)
		}
	}
	return nil
}

// writeHours writes one chunk: an UPDATE of the rows that exist, an
// INSERT of the others (ON CONFLICT for a row another replica inserted
// meanwhile), in one statement.
func (s *Syncer) writeHours(ctx context.Context, keys []hourKey, m map[hourKey]*hourCount) error {
	n := len(keys)
	sources, hours := make([]string, n), make([]time.Time, n)
	runs, notModified, requests, waits := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	items := make([]int64, n)
	first, last, finished := make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	durations, lateSum, lateMax := make([]float64, n), make([]float64, n), make([]float64, n)
	for i, k := range keys {
		c := m[k]
		sources[i], hours[i] = k.source, k.hour
		runs[i], notModified[i], requests[i], waits[i], items[i] = c.runs, c.notModified, c.requests, c.waits, c.items
		first[i], last[i], finished[i] = c.first, c.last, c.lastFinished
		durations[i], lateSum[i], lateMax[i] = c.durationMs, c.latenessSum, c.latenessM
	}
	_, err := s.pool.Exec(ctx, flushHoursSQL, sources, hours, runs, notModified, requests, items, waits,
		first, last, finished, durations, lateSum, lateMax)
	return err
}

// flushHoursSQL adds counts to sync_run_hours: $1..$13 are the rows'
// source, hour, runs, not_modified, requests, items_seen,
// rate_limit_waits, first/last started, last finished, duration sum,
// lateness sum and max.
const flushHoursSQL = `
WITH x AS (
    SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::int[], $4::int[], $5::int[], $6::bigint[], $7::int[],
                         $8::timestamptz[], $9::timestamptz[], $10::timestamptz[], $11::float8[], $12::float8[], $13::float8[])
        AS x(source, hour, runs, not_modified, requests, items_seen, rate_limit_waits,
             first_started_at, last_started_at, last_finished_at, duration_ms_sum, lateness_seconds_sum, lateness_seconds_max)
), updated AS (
    UPDATE sync_run_hours h SET
        runs = h.runs + x.runs,
        not_modified = h.not_modified + x.not_modified,
        requests = h.requests + x.requests,
        items_seen = h.items_seen + x.items_seen,
        rate_limit_waits = h.rate_limit_waits + x.rate_limit_waits,
        first_started_at = least(h.first_started_at, x.first_started_at),
        last_started_at = greatest(h.last_started_at, x.last_started_at),
        last_finished_at = greatest(h.last_finished_at, x.last_finished_at),
        duration_ms_sum = h.duration_ms_sum + x.duration_ms_sum,
        lateness_seconds_sum = h.lateness_seconds_sum + x.lateness_seconds_sum,
        lateness_seconds_max = greatest(h.lateness_seconds_max, x.lateness_seconds_max)
    FROM x
    WHERE h.source = x.source AND h.hour = x.hour
    RETURNING h.source, h.hour
)
INSERT INTO sync_run_hours AS h (source, hour, runs, not_modified, requests, items_seen, rate_limit_waits,
                                 first_started_at, last_started_at, last_finished_at,
                                 duration_ms_sum, lateness_seconds_sum, lateness_seconds_max)
SELECT x.source, x.hour, x.runs, x.not_modified, x.requests, x.items_seen, x.rate_limit_waits,
       x.first_started_at, x.last_started_at, x.last_finished_at, x.duration_ms_sum, x.lateness_seconds_sum, x.lateness_seconds_max
FROM x
WHERE NOT EXISTS (SELECT 1 FROM updated u WHERE u.source = x.source AND u.hour = x.hour)
ON CONFLICT (source, hour) DO UPDATE SET
    runs = h.runs + excluded.runs,
    not_modified = h.not_modified + excluded.not_modified,
    requests = h.requests + excluded.requests,
    items_seen = h.items_seen + excluded.items_seen,
    rate_limit_waits = h.rate_limit_waits + excluded.rate_limit_waits,
    first_started_at = least(h.first_started_at, excluded.first_started_at),
    last_started_at = greatest(h.last_started_at, excluded.last_started_at),
    last_finished_at = greatest(h.last_finished_at, excluded.last_finished_at),
    duration_ms_sum = h.duration_ms_sum + excluded.duration_ms_sum,
    lateness_seconds_sum = h.lateness_seconds_sum + excluded.lateness_seconds_sum,
    lateness_seconds_max = greatest(h.lateness_seconds_max, excluded.lateness_seconds_max)`

// rollupLoop flushes the rollup every RollupEvery until ctx ends.
func (s *Syncer) rollupLoop(ctx context.Context) {
	t := time.NewTicker(s.conf.RollupEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.flushRollup(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("count quiet runs; kept for the next flush", "error", err)
			}
		}
	}
}

// finalFlush writes what the rollup holds when a replica stops or RunDue
// ends, with a bounded wait of its own (the caller's context may be over).
func (s *Syncer) finalFlush(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return s.flushRollup(ctx)
}
