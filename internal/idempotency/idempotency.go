// Package idempotency owns the idempotency_keys table: the first answer to
// a create sent with an Idempotency-Key header, so that a retry with the
// same key and the same body gets that answer again and creates nothing,
// and a retry with another body is refused.
//
// Claim runs in the create's transaction, before the create: it takes the
// key with a transaction-scoped advisory lock, so a concurrent request
// with the same key waits on it until the first commits (then it finds
// the answer) or rolls back (then it takes the key itself), and reads the
// key's answer. Save writes the key's one row, with its answer, in the
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
	"github.com/lookout-dev/lookout/internal/db"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs statements: a pgx.Tx (Claim and Save want the create's).
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

// Hash is the request hash Claim compares: SHA-256 of the operation and body.
func Hash(operation string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(operation))
	h.Write([]byte{0})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Claim takes key for owner in tx. It returns (nil, nil) when the key is
// new (go on, then Save), the stored answer when the same request was
// already answered, or a *MismatchError.
func Claim(ctx context.Context, tx Querier, owner, key, operation, requestHash string) (*Stored, error) {
	if len(key) > MaxKeyLength {
		return nil, fmt.Errorf("Idempotency-Key is %d characters, at most %d are allowed", len(key), MaxKeyLength)
	}
	if _, err := tx.Exec(ctx, queryLock, owner, key); err != nil {
		return nil, fmt.Errorf("lock idempotency key: %w", err)
	}
	return read(tx.QueryRow(ctx, queryRead, owner, key), key, operation, requestHash)
}

// QueueClaim is Claim's statements queued in b, to be sent in one round
// trip with the BEGIN of the request's transaction before them; the
// caller passes the batch's results, at the first of them, to Claimed. A
// key longer than MaxKeyLength is refused before anything is queued.
func QueueClaim(b *pgx.Batch, owner, key, operation, requestHash string) error {
	if len(key) > MaxKeyLength {
		return fmt.Errorf("Idempotency-Key is %d characters, at most %d are allowed", len(key), MaxKeyLength)
	}
	b.Queue(queryLock, owner, key)
	b.Queue(queryRead, owner, key)
	return nil
}

// Claimed is the rest of Claim once QueueClaim's statements were sent:
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

// Save writes key with the answer of the request that claimed it, in its
// transaction.
func Save(ctx context.Context, tx Querier, owner, key, operation, requestHash string, s Stored) error {
	if _, err := tx.Exec(ctx, querySave, owner, key, operation, requestHash, s.Status, s.Response, s.Sealed); err != nil {
		return fmt.Errorf("save idempotency key: %w", err)
	}
	return nil
}

// QueueSave is Save queued in b, to be sent in the transaction of the
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
