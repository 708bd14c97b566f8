package evaluator

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/db"
)

// warmUp opens a connection per worker (and the listener's) before the evaluator listens, and
// readies each for its first batch: in a transaction it rolls back, it
// runs the claim with a limit of 0, the settle of no change, a COPY of
// no evaluation and the count of one. A new connection's first batch otherwise pays for the
// connection, the preparation of each statement, and the server loading
// its catalog caches for changes, evaluations and their partitions and
// indexes (the first custom plan of the claim alone took 60–200 ms at
// load): commit-to-decision (3) had its tail in the first second of a run
// (docs/benchmarks.md). A failure is logged: the first batch then pays.
// On Citus only the claim's candidates are read (the claim takes row locks
// on one shard at a time).
func (e *Evaluator) warmUp(ctx context.Context) {
	sh, err := db.ShardingOf(ctx, e.pool)
	if err != nil {
		e.logger.Warn("ready the connections before listening", "error", err)
		return
	}
	// One more than the workers: the listener takes one of the pool's idle
	// connections for its own when it starts.
	n := min(max(e.conf.Workers, 1)+1, int(e.pool.Config().MaxConns))
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := e.pool.Acquire(ctx)
		if err != nil {
			e.logger.Warn("ready the connections before listening", "error", err)
			return
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		if err := e.warmConn(ctx, c.Conn(), sh.Distributed()); err != nil {
			if !errors.Is(err, context.Canceled) {
				e.logger.Warn("ready the connections before listening", "error", err)
			}
			return
		}
	}
}

// warmConn runs the batch's statements on conn without effect.
func (e *Evaluator) warmConn(ctx context.Context, conn *pgx.Conn, distributed bool) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		e.queueBound(b)
		if distributed {
			b.Queue(candidatesSQL, 0, nil)
		} else {
			b.Queue(claimSQL, 0, nil)
			b.Queue(settleDoneSQL, []int64{}, nil, 0, time.Now())
			// One row, so that its function's statement is planned too
			// (rolled back: nothing is counted).
			b.Queue(countEvaluationsSQL, []time.Time{time.Now()}, []string{"skip"}, []string{"filter"}, []string{""},
				[]*float64{nil}, []*int64{nil})
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if !distributed {
			if _, err := db.CopyFrom(ctx, tx, "evaluations", evaluationColumns, copyEvaluations, evaluationRows(nil, nil, nil, nil)); err != nil {
				return err
			}
		}
		return errWarmedUp // roll back
	})
	if errors.Is(err, errWarmedUp) {
		return nil
	}
	return err
}

// errWarmedUp rolls warmConn's transaction back.
var errWarmedUp = errors.New("warmed up")
