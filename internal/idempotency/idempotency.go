// Package idempotency owns the idempotency_keys table: the first answer to
// a create sent with an Idempotency-Key header, so that a retry with the
// same key and the same body gets that answer again and creates nothing,
// and a retry with another body is refused.
//
// The claim (QueueClaim, Claimed) runs in the create's transaction, before the create: it takes the
// key with a transaction-scoped advisory lock, so a concurrent request
// with the same key waits on it until the first commits (then it finds
// the answer) or rolls back (then it takes the key itself), and reads the
// key's answer. QueueSave writes the key's one row, with its answer, in the
// same transaction (queued with its COMMIT by control): a key is one
// insert, not an insert and an update. A create that fails rolls back and
// leaves the key free. Named queries are in queries.go.
package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lookout-dev/lookout/internal/db"
)

// Querier runs statements (CountExpired's).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TTLDefault is how long a key is kept.
const TTLDefault = 24 * time.Hour

// MaxKeyLength bounds a key.
const MaxKeyLength = 255

// Stored is the answer a key already has.
type Stored struct {
	Status   int
	Response []byte
	// Sealed is set when Response is encrypted (it carries a secret).
	Sealed bool
}

// MismatchError is a key reused with another request.
type MismatchError struct {
	Key, Operation, PriorOperation string
}

func (e *MismatchError) Error() string {
	if e.Operation != e.PriorOperation {
		return fmt.Sprintf("Idempotency-Key %q was used for %s; use a new key for each new request", e.Key, e.PriorOperation)
	}
	return fmt.Sprintf("Idempotency-Key %q was used with a different request body; send the same body to retry, or use a new key for a new request", e.Key)
}

// Hash is the request hash Claimed compares: SHA-256 of the operation and body.
func Hash(operation string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(operation))
	h.Write([]byte{0})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// QueueClaim queues in b the claim of key for owner: its lock for the
// rest of the transaction, then the read of its stored answer, to be sent
// in one round trip with the BEGIN of the request's transaction before
// them; the caller passes the batch's results, at the first of them, to
// Claimed (then, for a new key, QueueSave with its COMMIT). A key longer
// than MaxKeyLength is refused before anything is queued.
func QueueClaim(b *pgx.Batch, owner, key string) error {
	if len(key) > MaxKeyLength {
		return fmt.Errorf("Idempotency-Key is %d characters, at most %d are allowed", len(key), MaxKeyLength)
	}
	b.Queue(queryLock, owner, key)
	b.Queue(queryRead, owner, key)
	return nil
}

// Claimed is the rest of the claim once QueueClaim's statements were sent:
// it reads their results from br and returns (nil, nil) when the key is
// new, else the stored answer or a *MismatchError.
func Claimed(br pgx.BatchResults, key, operation, requestHash string) (*Stored, error) {
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("lock idempotency key: %w", err)
	}
	return read(br.QueryRow(), key, operation, requestHash)
}

func read(row pgx.Row, key, operation, requestHash string) (*Stored, error) {
	var s Stored
	var op, hash string
	err := row.Scan(&op, &hash, &s.Status, &s.Response, &s.Sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read idempotency key: %w", err)
	}
	if op != operation || hash != requestHash {
		return nil, &MismatchError{Key: key, Operation: operation, PriorOperation: op}
	}
	return &s, nil
}

// QueueSave queues in b the insert of key with its answer, to be sent in the transaction of the
// request that claimed key with its other last statements in one round
// trip (the caller sends b before it commits, or with its COMMIT).
func QueueSave(b *pgx.Batch, owner, key, operation, requestHash string, s Stored) {
	b.Queue(querySave, owner, key, operation, requestHash, s.Status, s.Response, s.Sealed)
}

// PruneBatch deletes at most limit keys made before before and returns how
// many. A key younger than TTLDefault is in its window (a retry with it
// must get the first answer): callers pass a before at least TTLDefault
// ago. internal/retention, the one pruner of the table, calls it with
// retention.idempotency_keys until a batch is short.
func PruneBatch(ctx context.Context, q db.Querier, before time.Time, limit int) (int64, error) {
	n, err := db.PruneEachShard(ctx, q, "idempotency_keys", before, limit, queryPruneCandidates, queryPrune)
	if err != nil {
		return n, fmt.Errorf("prune idempotency keys made before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}

// CountExpired counts the keys PruneBatch would delete (a dry run).
func CountExpired(ctx context.Context, q Querier, before time.Time) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, queryCountExpired, before).Scan(&n); err != nil {
		return 0, fmt.Errorf("count idempotency keys made before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
