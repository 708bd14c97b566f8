package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
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

// maxClaim is the most sources one claim statement takes.
const maxClaim = 500

// claimCTE picks up to $2 active sources: first those an operator asked
// to run (oldest request first), then those due at $6 (oldest first),
// skipping rows another replica has locked and sources whose lease is
// still held, and locks them. Each arm walks its own partial index in
// order and stops at the limit, so a claim costs the same with ten or a
// hundred thousand sources due. $1 restricts the claim to the sources this
// replica knows, when the table holds others (NULL: no restriction). The
// arms return the state of the locked row versions.
const claimCTE = `
WITH req AS (
    SELECT name, cursor, lease_owner, lease_expires_at, run_id, run_requested_at, next_run_at, interval_reason,
           failure_count, interval_seconds, last_change_at, last_success_at, last_run_at, created_at
    FROM sources
    WHERE run_requested_at IS NOT NULL AND status = 'active'
      AND (lease_expires_at IS NULL OR lease_expires_at < $4)
      AND ($1::text[] IS NULL OR name = ANY ($1::text[]))
    ORDER BY run_requested_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT name, cursor, lease_owner, lease_expires_at, run_id, run_requested_at, next_run_at, interval_reason,
           failure_count, interval_seconds, last_change_at, last_success_at, last_run_at, created_at
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
)`

// claimSQL leases the picked sources: their lease (owner, expiry, run id
// from sync_runs' sequence) is written and committed at once, so a run
// can go on as long as it renews it. The sync_runs row itself is written
// only if the run turns out to be worth a row
// (docs/acquisition.md#quiet-runs).
const claimSQL = claimCTE + `
UPDATE sources s
SET lease_owner = $3, lease_expires_at = $4::timestamptz + $5::interval, run_requested_at = NULL,
    run_id = nextval('sync_runs_id_seq')
FROM picked
WHERE s.name = picked.name
RETURNING s.name, s.run_id, picked.cursor, coalesce(picked.lease_owner, ''), picked.run_id, picked.lease_expires_at,
          picked.run_requested_at, picked.next_run_at, coalesce(picked.interval_reason, ''), picked.failure_count,
          picked.interval_seconds, picked.last_change_at, picked.last_success_at, picked.last_run_at, picked.created_at,
          s.lease_expires_at`

// lockSQL only locks the picked sources, in a transaction that stays open
// while their runs fetch (a claim batch): a run that ends quietly within
// it is completed in it, and its source row is written once, by the
// completion. $3 and $5 are unused; the lease expiry returned is NULL.
const lockSQL = claimCTE + `
SELECT picked.name, nextval('sync_runs_id_seq'), picked.cursor, coalesce(picked.lease_owner, ''), picked.run_id,
       picked.lease_expires_at, picked.run_requested_at, picked.next_run_at, coalesce(picked.interval_reason, ''),
       picked.failure_count, picked.interval_seconds, picked.last_change_at, picked.last_success_at, picked.last_run_at,
       picked.created_at, NULL::timestamptz
FROM picked
WHERE $3::text IS NOT NULL AND $5::interval IS NOT NULL`

// claim leases up to limit active sources that were due at asOf (or that
// an operator asked to run). A source whose lease expired (its holder
// died) is taken over: its run is recorded as abandoned and the new run's
// reason is takeover.
//
// With spread (the daemon catching up after downtime), a scheduled source
// that fell due during the outage (overdue by more than spreadAfter) is
// not run now: its next run is moved to a random point within as long as
// it has been overdue, at most its interval (at most an hour), so that the
// sources an outage made due do not all hit their upstreams at once. It
// returns the claims to run and how many it spread.
func (s *Syncer) claim(ctx context.Context, limit int, asOf time.Time, spread bool) ([]claim, int, error) {
	var claims []claim
	var spreadN int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		claims, spreadN, err = s.claimIn(ctx, tx, limit, asOf, spread, false)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("claim due sources: %w", err)
	}
	s.claimed(claims, spreadN)
	return claims, spreadN, nil
}

// claimIn picks and takes due sources in tx: leased (committed with tx)
// or, with locked, only locked in tx (claimBatch). It gives back the
// sources of other configurations, spreads overdue ones, and records the
// runs it took over as abandoned.
func (s *Syncer) claimIn(ctx context.Context, tx pgx.Tx, limit int, asOf time.Time, spread, locked bool) ([]claim, int, error) {
	now := s.conf.Now()
	var names any // NULL: every source in the table is one of ours
	if s.restrict.Load() {
		names = s.claimable()
	}
	sql := claimSQL
	if locked {
		sql = lockSQL
	}
	rows, err := tx.Query(ctx, sql, names, limit, s.conf.Owner, now, s.conf.Lease, asOf)
	if err != nil {
		return nil, 0, err
	}
	var claims, taken, unknown, overdue []claim
	for rows.Next() {
		var c claim
		var prevRun *int64
		var prevEnd, requested, leaseEnd *time.Time
		if err := rows.Scan(&c.name, &c.runID, &c.cursor, &c.prevOwner, &prevRun, &prevEnd, &requested, &c.dueAt,
			&c.dueReason, &c.failures, &c.interval, &c.lastChange, &c.lastSuccess, &c.lastRun, &c.createdAt, &leaseEnd); err != nil {
			rows.Close()
			return nil, 0, err
		}
		if leaseEnd != nil {
			c.leaseEnd = *leaseEnd
		}
		c.startedAt = now
		c.reason = "schedule"
		if prevRun != nil {
			c.prevRun = *prevRun
		}
		switch {
		case c.prevOwner != "":
			c.reason = "takeover"
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
		if spread && s.missedRuns(c) {
			overdue = append(overdue, c)
			continue
		}
		claims = append(claims, c)
		if c.reason == "takeover" {
			taken = append(taken, c)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if len(unknown) > 0 {
		s.restrict.Store(true)
		if !locked { // a lock is given back with the transaction
			if err := s.handBack(ctx, tx, unknown); err != nil {
				return nil, 0, err
			}
		}
	}
	if err := s.spreadOverdue(ctx, tx, overdue, now, locked); err != nil {
		return nil, 0, err
	}
	if err := s.abandonTaken(ctx, tx, taken); err != nil {
		return nil, 0, err
	}
	return claims, len(overdue), nil
}

// claimed counts and logs claims once they are committed (leased) or
// locked.
func (s *Syncer) claimed(claims []claim, spreadN int) {
	if spreadN > 0 {
		s.stats.spread(spreadN)
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
}

// spreadPrefix starts the interval_reason of a source whose run was
// spread after an outage; such a source runs when it is due again, late
// or not.
const spreadPrefix = "spread after an outage: "

// maxSpread bounds the window an overdue source's run is spread over.
const maxSpread = time.Hour

// spreadAfter is how late a scheduled source must be, when a replica
// catches up after downtime, for its run to be spread instead of run at
// once: the sources that fell due in the last spreadAfter of an outage (a
// rolling restart's few seconds) are a burst no larger than that many
// seconds of the usual demand.
const spreadAfter = 30 * time.Second

// spreadInterval is the interval of c's source for spreading: its current
// interval (the time between cron slots for cron), at most maxSpread; 0
// when it has none.
func (s *Syncer) spreadInterval(c claim) time.Duration {
	var iv time.Duration
	if c.interval != nil {
		iv = time.Duration(*c.interval * float64(time.Second))
	} else if src := s.source(c.name); src != nil {
		iv = src.schedule.Initial()
	}
	return min(iv, maxSpread)
}

// spreadWindow is the window an overdue source's next run is spread over:
// as long as it has been overdue, at most its interval. A source that
// missed runs spreads over its interval; one that fell due twenty minutes
// before the end of an outage spreads over those twenty minutes, so that
// no source is made later than the outage made it.
func (s *Syncer) spreadWindow(c claim) time.Duration {
	return min(s.spreadInterval(c), c.lateness)
}

// missedRuns reports whether a scheduled claim fell due during an outage
// — it is overdue by more than spreadAfter (or than its interval, if
// shorter) — and was not spread already.
func (s *Syncer) missedRuns(c claim) bool {
	iv := s.spreadInterval(c)
	return c.reason == "schedule" && iv > 0 && c.lateness > min(spreadAfter, iv) && !strings.HasPrefix(c.dueReason, spreadPrefix)
}

// spreadOverdue gives back the claims of sources that missed runs, each
// due again at a random point within its interval.
func (s *Syncer) spreadOverdue(ctx context.Context, tx pgx.Tx, overdue []claim, now time.Time, locked bool) error {
	if len(overdue) == 0 {
		return nil
	}
	n := len(overdue)
	names, reasons := make([]string, n), make([]string, n)
	at, runs := make([]time.Time, n), make([]*int64, n)
	for i, c := range overdue {
		w := s.spreadWindow(c)
		names[i], at[i] = c.name, now.Add(rand.N(w))
		if c.prevRun != 0 {
			runs[i] = &c.prevRun
		}
		reasons[i] = fmt.Sprintf("%soverdue by %s (interval %s): next run spread over %s, at %s",
			spreadPrefix, c.lateness.Round(time.Second), s.spreadInterval(c), w.Round(time.Second), at[i].UTC().Format(time.RFC3339))
	}
	_, err := tx.Exec(ctx, `
		UPDATE sources s SET lease_owner = NULL, lease_expires_at = NULL, run_id = x.run_id,
		       next_run_at = x.at, interval_reason = x.reason
		FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::bigint[]) AS x(name, at, reason, run_id)
		WHERE s.name = x.name AND (s.lease_owner = $5 OR $6)`, names, at, reasons, runs, s.conf.Owner, locked)
	if err != nil {
		return fmt.Errorf("spread sources that missed runs: %w", err)
	}
	return nil
}

// handBack undoes the claim of sources this replica does not know (the
// table holds sources of another replica's configuration), and limits
// its claims to its own sources from then on.
func (s *Syncer) handBack(ctx context.Context, tx pgx.Tx, unknown []claim) error {
	if len(unknown) == 0 {
		return nil
	}
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
