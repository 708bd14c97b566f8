package control

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/idempotency"
)

// Answer is what a create answered: its status and JSON body, and whether
// the body carries a secret (it is then stored sealed for a retry).
type Answer struct {
	Status int
	Body   json.RawMessage
	Secret bool
	// Replayed is set when the answer is the stored one of an earlier
	// request with the same Idempotency-Key.
	Replayed bool
}

// Idempotent runs create in one transaction with p's Idempotency-Key
// (none: create runs as is). The first request with a key runs create and
// stores its answer in the same transaction; a retry with the same key
// and body gets that answer (Replayed) without running create; a retry
// with another body is an *idempotency.MismatchError. A create that fails
// rolls back and leaves the key free.
//
// The definitions create makes through CreateWatch or CreateSource do not
// NOTIFY in the transaction: Idempotent wakes the followers after the
// commit (definitions.Store.Wake, one NOTIFY shared by the creates that
// committed meanwhile), so that the commits of concurrent creates do not
// queue on PostgreSQL's NOTIFY queue lock.
func (s *Service) Idempotent(ctx context.Context, p Principal, key, operation string, body []byte,
	create func(ctx context.Context, tx pgx.Tx) (*Answer, error)) (*Answer, error) {
	var out *Answer
	wake := &wakeAfterCommit{}
	ctx = context.WithValue(ctx, wakeAfterCommitKey{}, wake)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if key != "" {
			if len(key) > idempotency.MaxKeyLength {
				return &InvalidError{Errors: []FieldError{{Header: "Idempotency-Key", Detail: fmt.Sprintf("at most %d characters", idempotency.MaxKeyLength)}}}
			}
			prior, err := idempotency.Claim(ctx, tx, p.Owner, key, operation, idempotency.Hash(operation, body))
			if err != nil {
				return err
			}
			if prior != nil {
				resp := prior.Response
				if prior.Sealed {
					plain, err := s.conf.Keys.Open(string(resp), "idempotency:"+p.Owner+":"+key)
					if err != nil {
						return fmt.Errorf("open the stored answer of Idempotency-Key %q: %w", key, err)
					}
					resp = plain
				}
				out = &Answer{Status: prior.Status, Body: resp, Replayed: true}
				return nil
			}
		}
		a, err := create(ctx, tx)
		if err != nil {
			return err
		}
		out = a
		if key == "" {
			return nil
		}
		stored := idempotency.Stored{Status: a.Status, Response: a.Body}
		if a.Secret {
			sealed, err := s.conf.Keys.Seal(a.Body, "idempotency:"+p.Owner+":"+key)
			if err != nil {
				return err
			}
			stored.Response, stored.Sealed = []byte(sealed), true
		}
		return idempotency.Save(ctx, tx, p.Owner, key, stored)
	})
	if err != nil {
		return nil, err
	}
	if wake.changed {
		// Committed: a failed wake-up is not the create's failure (the
		// followers catch up on their slow timer).
		if err := s.store.Wake(ctx); err != nil {
			s.logger.Warn("wake the followers of the definitions after a create", "operation", operation, "error", err)
		}
	}
	return out, nil
}

// wakeAfterCommit is set in the context of Idempotent's create: the
// definitions it changes wake the followers after its commit.
type wakeAfterCommit struct{ changed bool }

type wakeAfterCommitKey struct{}

// storeIn returns the definitions store in tx: Deferred when ctx is an
// Idempotent create's (which wakes the followers after its commit), else
// In (a NOTIFY that commits with tx).
func (s *Service) storeIn(ctx context.Context, tx pgx.Tx) *definitions.Store {
	if w, ok := ctx.Value(wakeAfterCommitKey{}).(*wakeAfterCommit); ok {
		w.changed = true
		return s.store.Deferred(tx)
	}
	return s.store.In(tx)
}
