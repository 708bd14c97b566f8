package drift

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Feed queues the model answers with a reason written since the last
// feed (at most Config.Batch × MaxBatchesPerPass of them) and records
// the digest changes their model calls carry, in one transaction. It
// returns the decisions queued and the versions recorded.
func (s *Service) Feed(ctx context.Context) (fed, versions int, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, queryLockVersions); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, queryFeed, FeedLookback, s.conf.Batch*MaxBatchesPerPass)
		if err != nil {
			return err
		}
		type seen struct {
			model, digest string
			at            time.Time
			id            int64
		}
		var calls []seen
		for rows.Next() {
			var c seen
			if err := rows.Scan(&c.id, &c.at, &c.model, &c.digest); err != nil {
				return err
			}
			calls = append(calls, c)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		fed = len(calls)
		// RETURNING has no order: the versions are recorded in call order.
		slices.SortFunc(calls, func(a, b seen) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return cmp.Compare(a.id, b.id)
		})
		last := map[string]string{}
		for _, c := range calls {
			if c.digest == "" || last[c.model] == c.digest {
				continue
			}
			last[c.model] = c.digest
			n, err := s.recordVersion(ctx, tx, c.model, c.digest, c.at)
			if err != nil {
				return err
			}
			versions += n
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("queue model decisions for embedding: %w", err)
	}
	if fed > 0 {
		s.logger.Debug("decisions queued for embedding", "count", fed)
	}
	return fed, versions, nil
}

func (s *Service) recordVersion(ctx context.Context, q pgx.Tx, model, digest string, at time.Time) (int, error) {
	var id int64
	err := q.QueryRow(ctx, queryRecordVersion, model, digest, at).Scan(&id)
	if err == pgx.ErrNoRows {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("record digest %s of model %s: %w", digest, model, err)
	}
	s.logger.Info("model version recorded", "model", model, "digest", digest, "seen_at", at.UTC())
	return 1, nil
}

// EmbedBatch claims up to Config.Batch pending decisions, embeds their
// reasons in one /api/embed request and stores the vectors. When the
// embedding model fails, the batch is held — given back, pending, due
// again after a backoff that grows with its attempts — and counted in
// held; err is only a database error.
func (s *Service) EmbedBatch(ctx context.Context) (embedded, held int, err error) {
	rows, err := s.pool.Query(ctx, queryClaim, s.conf.Owner, s.conf.Lease, s.conf.Batch)
	if err != nil {
		return 0, 0, fmt.Errorf("claim decisions to embed: %w", err)
	}
	var ids []int64
	var reasons []string
	attempts := 0
	for rows.Next() {
		var id int64
		var reason string
		var n int
		if err := rows.Scan(&id, &reason, &n); err != nil {
			rows.Close()
			return 0, 0, fmt.Errorf("claim decisions to embed: %w", err)
		}
		ids, reasons, attempts = append(ids, id), append(reasons, reason), max(attempts, n)
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("claim decisions to embed: %w", err)
	}
	if len(ids) == 0 {
		return 0, 0, nil
	}
	digest, derr := s.emb.Digest(ctx, s.conf.EmbedModel, s.conf.Timeout)
	vecs, err := s.emb.Embed(ctx, s.conf.EmbedModel, reasons, s.conf.Timeout)
	if err == nil && derr != nil {
		err = derr
	}
	if err != nil {
		wait := s.conf.Hold.Delay(attempts)
		// The hold must be written even when ctx ended with the request.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, herr := s.pool.Exec(hctx, queryHold, ids, s.conf.Owner, wait, err.Error()); herr != nil {
			return 0, 0, fmt.Errorf("hold %d decision(s) the embedding model failed (%v): %w", len(ids), err, herr)
		}
		s.logger.Warn("embedding model failed; decisions held", "embed_model", s.conf.EmbedModel, "count", len(ids),
			"attempt", attempts, "retry_in", wait, "error", err)
		return 0, len(ids), nil
	}
	var b pgx.Batch
	for i, id := range ids {
		b.Queue(queryStore, id, s.conf.Owner, vecs[i], s.conf.EmbedModel, digest)
	}
	br := s.pool.SendBatch(ctx, &b)
	for range ids {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return embedded, 0, fmt.Errorf("store embeddings: %w", err)
		}
		embedded += int(tag.RowsAffected())
	}
	if err := br.Close(); err != nil {
		return embedded, 0, fmt.Errorf("store embeddings: %w", err)
	}
	if _, err := s.recordVersionNow(ctx, s.conf.EmbedModel, digest); err != nil {
		return embedded, 0, err
	}
	return embedded, 0, nil
}

// recordVersionNow records the embedding model's digest when it changed.
func (s *Service) recordVersionNow(ctx context.Context, model, digest string) (n int, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, queryLockVersions); err != nil {
			return err
		}
		n, err = s.recordVersion(ctx, tx, model, digest, time.Now())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("record the embedding model's version: %w", err)
	}
	return n, nil
}

// Queue counts the queue: decisions pending (of which held: tried and
// failed, waiting for their retry) and embedded.
type Queue struct {
	Pending  int `json:"pending" doc:"Decisions waiting to be embedded."`
	Held     int `json:"held" doc:"Of the pending, those the embedding model failed, waiting for their retry."`
	Embedded int `json:"embedded" doc:"Decisions embedded."`
}

// Querier is what the read functions need: a pool or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// QueueState counts the queue.
func QueueState(ctx context.Context, q Querier) (Queue, error) {
	var st Queue
	if err := q.QueryRow(ctx, queryQueue).Scan(&st.Pending, &st.Held, &st.Embedded); err != nil {
		return Queue{}, fmt.Errorf("count the drift queue: %w", err)
	}
	return st, nil
}
