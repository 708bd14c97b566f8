package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/sources"
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
	sql := sources.QueryClaim
	if locked {
		sql = sources.QueryLock
	}
	// On Citus, one run per shard of the candidates (db.ClaimGroups): the
	// run restricted to one shard's sources ($1) is a router query, where
	// Citus takes row locks.
	groups, err := db.ClaimGroups(ctx, tx, "sources", limit, sources.QueryCandidates,
		names, limit, s.conf.Owner, now, s.conf.Lease, asOf)
	if err != nil {
		return nil, 0, err
	}
	var rowsOf []claimRow
	for _, g := range groups {
		restrict := names
		if g.Keys != nil {
			restrict = g.Keys
		}
		rows, err := tx.Query(ctx, sql, restrict, g.Limit, s.conf.Owner, now, s.conf.Lease, asOf)
		if err != nil {
			return nil, 0, err
		}
		for rows.Next() {
			var r claimRow
			c := &r.claim
			if err := rows.Scan(&c.name, &c.runID, &c.cursor, &c.prevOwner, &r.prevRun, &r.prevEnd, &r.requested, &c.dueAt,
				&c.dueReason, &c.failures, &c.interval, &c.lastChange, &c.lastSuccess, &c.lastRun, &c.createdAt, &r.leaseEnd); err != nil {
				rows.Close()
				return nil, 0, err
			}
			rowsOf = append(rowsOf, r)
		}
		if err := rows.Err(); err != nil {
			return nil, 0, err
		}
	}
	var claims, taken, unknown, overdue []claim
	for _, r := range rowsOf {
		c, prevRun, prevEnd, requested, leaseEnd := r.claim, r.prevRun, r.prevEnd, r.requested, r.leaseEnd
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

// claimRow is a row of the claim statement before claimIn sorts it out.
type claimRow struct {
	claim
	prevRun                      *int64
	prevEnd, requested, leaseEnd *time.Time
}

// claimed counts and logs claims once they are committed (leased) or
// locked.
func (s *Syncer) claimed(claims []claim, spreadN int) {
	if spreadN > 0 {
		s.stats.spread(spreadN)
	}
	for _, c := range claims {
		s.conf.Metrics.PollStarted(s.connectorOf(c.name))
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
	_, err := tx.Exec(ctx, sources.QuerySpreadOverdue, names, at, reasons, runs, s.conf.Owner, locked)
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
	_, err := tx.Exec(ctx, sources.QueryHandBack, names, owners, ends, runs, requested, s.conf.Owner)
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
	var names, owners []string
	var started []time.Time
	for _, c := range taken {
		if c.prevRun == 0 {
			continue
		}
		ids = append(ids, c.prevRun)
		names = append(names, c.name)
		owners = append(owners, c.prevOwner)
		started = append(started, c.prevEnd.Add(-s.conf.Lease))
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, sources.QueryAbandonTaken, ids, names, owners, started, s.conf.Now(), s.conf.Owner)
	if err != nil {
		return fmt.Errorf("record taken-over runs as abandoned: %w", err)
	}
	return nil
}
