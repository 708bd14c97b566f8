package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/metrics"
)

// claim is a leased run of a source, with the source's state as the claim
// found it: a quiet run decides its next run from it without reading the
// source again (the lease keeps every other writer of these columns out,
// except operators, whose columns a quiet completion does not write).
type claim struct {
	name      string
	runID     int64
	cursor    json.RawMessage
	reason    string // schedule, manual, takeover
	prevOwner string
	prevRun   int64     // the run whose lease expired (takeover); 0 if none
	prevEnd   time.Time // when that lease expired
	leaseEnd  time.Time // the lease's expiry as claimed (renewed while the run goes on)
	startedAt time.Time // the claim, on the syncer's clock
	dueAt     time.Time // when it became due: next_run_at, the run-now request, or the expired lease
	dueReason string    // sources.interval_reason at the claim
	lateness  time.Duration

	failures    int
	interval    *float64
	lastChange  *time.Time
	lastSuccess *time.Time
	lastRun     *time.Time
	createdAt   time.Time

	// Only for a source handed back: its lease and request as they were.
	prevOwnerEnd, requested *time.Time
}

// maxClaim is the most sources one claim statement leases.
const maxClaim = 500

// claimSQL leases up to $2 active sources: first those an operator asked
// to run (oldest request first), then those due at $6 (oldest first),
// skipping rows another replica has locked and sources whose lease is
// still held. Each arm walks its own partial index in order and stops at
// the limit, so a claim costs the same with ten or a hundred thousand
// sources due. The run id comes from sync_runs' sequence; the sync_runs
// row itself is written only if the run turns out to be worth a row
// (docs/acquisition.md#quiet-runs). $1 restricts the claim to the sources
// this replica knows, when the table holds others (NULL: no restriction).
const claimSQL = `
WITH req AS (
    SELECT name, lease_owner, lease_expires_at, run_id, run_requested_at, next_run_at
    FROM sources
    WHERE run_requested_at IS NOT NULL AND status = 'active'
      AND (lease_expires_at IS NULL OR lease_expires_at < $4)
      AND ($1::text[] IS NULL OR name = ANY ($1::text[]))
    ORDER BY run_requested_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT name, lease_owner, lease_expires_at, run_id, run_requested_at, next_run_at
    FROM sources
    WHERE status = 'active' AND next_run_at <= $6 AND run_requested_at IS NULL
      AND (lease_expires_at IS NULL OR lease_expires_at < $4)
      AND ($1::text[] IS NULL OR name = ANY ($1::text[]))
    ORDER BY next_run_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT * FROM req
    UNION ALL
    (SELECT * FROM due LIMIT $2 - (SELECT count(*) FROM req))
)
UPDATE sources s
SET lease_owner = $3, lease_expires_at = $4::timestamptz + $5::interval, run_requested_at = NULL,
    run_id = nextval('sync_runs_id_seq')
FROM picked
WHERE s.name = picked.name
RETURNING s.name, s.run_id, s.cursor, coalesce(picked.lease_owner, ''), picked.run_id, picked.lease_expires_at,
          picked.run_requested_at, picked.next_run_at, coalesce(s.interval_reason, ''), s.failure_count,
          s.interval_seconds, s.last_change_at, s.last_success_at, s.last_run_at, s.created_at, s.lease_expires_at`

// claim leases up to limit active sources that were due at asOf (or that
// an operator asked to run). A source whose lease expired (its holder
// died) is taken over: its run is recorded as abandoned and the new run's
// reason is takeover.
func (s *Syncer) claim(ctx context.Context, limit int, asOf time.Time) ([]claim, error) {
	now := s.conf.Now()
	var names any // NULL: every source in the table is one of ours
	if s.restrict.Load() {
		names = s.claimable()
	}
	var claims []claim
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		claims = claims[:0]
		rows, err := tx.Query(ctx, claimSQL, names, limit, s.conf.Owner, now, s.conf.Lease, asOf)
		if err != nil {
			return err
		}
		var taken, unknown []claim
		for rows.Next() {
			var c claim
			var prevRun *int64
			var prevEnd, requested *time.Time
			if err := rows.Scan(&c.name, &c.runID, &c.cursor, &c.prevOwner, &prevRun, &prevEnd, &requested, &c.dueAt,
				&c.dueReason, &c.failures, &c.interval, &c.lastChange, &c.lastSuccess, &c.lastRun, &c.createdAt, &c.leaseEnd); err != nil {
				return err
			}
			c.startedAt = now
			c.reason = "schedule"
			switch {
			case c.prevOwner != "":
				c.reason = "takeover"
				if prevRun != nil {
					c.prevRun = *prevRun
				}
				if prevEnd != nil {
					c.prevEnd = *prevEnd
					if prevEnd.After(c.dueAt) {
						c.dueAt = *prevEnd // claimable only since the lease expired
					}
				}
			case requested != nil:
				c.reason = "manual"
				if requested.Before(c.dueAt) {
					c.dueAt = *requested
				}
			}
			c.lateness = max(now.Sub(c.dueAt), 0)
			if s.runnable(c.name) == nil {
				// Registered by a replica with another configuration: not ours.
				c.prevOwnerEnd, c.requested = prevEnd, requested
				unknown = append(unknown, c)
				continue
			}
			claims = append(claims, c)
			if c.reason == "takeover" {
				taken = append(taken, c)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if err := s.handBack(ctx, tx, unknown); err != nil {
			return err
		}
		return s.abandonTaken(ctx, tx, taken)
	})
	if err != nil {
		return nil, fmt.Errorf("claim due sources: %w", err)
	}
	for _, c := range claims {
		s.conf.Metrics.PollStarted(c.name)
		s.conf.Metrics.ScheduleLateness(c.lateness)
		s.stats.claimedRun(c.lateness)
		if c.reason == "takeover" {
			s.conf.Metrics.ClaimsExpired(metrics.ComponentSyncer, 1)
			s.logger.Warn("took over expired lease", "source", c.name, "run_id", c.runID, "previous_owner", c.prevOwner,
				"previous_run_id", c.prevRun)
		}
	}
	return claims, nil
}

// handBack undoes the claim of sources this replica does not know (the
// table holds sources of another replica's configuration), and limits
// its claims to its own sources from then on.
func (s *Syncer) handBack(ctx context.Context, tx pgx.Tx, unknown []claim) error {
	if len(unknown) == 0 {
		return nil
	}
	s.restrict.Store(true)
	names, owners := make([]string, len(unknown)), make([]*string, len(unknown))
	ends, requested := make([]*time.Time, len(unknown)), make([]*time.Time, len(unknown))
	runs := make([]*int64, len(unknown))
	for i, c := range unknown {
		names[i], ends[i], requested[i] = c.name, c.prevOwnerEnd, c.requested
		if c.prevOwner != "" {
			owners[i] = &c.prevOwner
		}
		if c.prevRun != 0 {
			runs[i] = &c.prevRun
		}
	}
	_, err := tx.Exec(ctx, `
		UPDATE sources s SET lease_owner = x.owner, lease_expires_at = x.lease_expires_at, run_id = x.run_id,
		       run_requested_at = x.run_requested_at
		FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[], $5::timestamptz[])
		    AS x(name, owner, lease_expires_at, run_id, run_requested_at)
		WHERE s.name = x.name AND s.lease_owner = $6`, names, owners, ends, runs, requested, s.conf.Owner)
	if err != nil {
		return fmt.Errorf("hand back sources of another configuration: %w", err)
	}
	return nil
}

// abandonTaken records the runs whose leases the claim took over as
// abandoned. A run that had written nothing has no sync_runs row yet: it
// gets one, started when its last lease began. The row is found by id
// alone (sync_runs is partitioned by started_at, which the taker only
// estimates); the claim holds the sources' row locks, so the run it takes
// over cannot write its row meanwhile.
func (s *Syncer) abandonTaken(ctx context.Context, tx pgx.Tx, taken []claim) error {
	if len(taken) == 0 {
		return nil
	}
	var ids []int64
	var sources, owners []string
	var started []time.Time
	for _, c := range taken {
		if c.prevRun == 0 {
			continue
		}
		ids = append(ids, c.prevRun)
		sources = append(sources, c.name)
		owners = append(owners, c.prevOwner)
		started = append(started, c.prevEnd.Add(-s.conf.Lease))
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
		WITH x AS (
		    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[]) AS x(id, source, owner, started_at)
		), abandoned AS (
		    UPDATE sync_runs r SET status = 'abandoned', finished_at = $5,
		           error = 'lease expired while running; taken over by ' || $6
		    FROM x WHERE r.id = x.id AND r.source = x.source AND r.status = 'running'
		)
		INSERT INTO sync_runs (id, source, owner, reason, status, started_at, finished_at, error)
		SELECT x.id, x.source, x.owner, 'schedule', 'abandoned', x.started_at, $5,
		       'lease expired while running; taken over by ' || $6
		FROM x WHERE NOT EXISTS (SELECT 1 FROM sync_runs r WHERE r.id = x.id AND r.source = x.source)`, ids, sources, owners, started, s.conf.Now(), s.conf.Owner)
	if err != nil {
		return fmt.Errorf("record taken-over runs as abandoned: %w", err)
	}
	return nil
}
