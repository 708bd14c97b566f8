package control

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/db"
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
	// Value is what create encoded as Body, when it ran (not Replayed):
	// the caller answers with it instead of decoding Body again.
	Value any
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
//
// The create's audit rows (Service.record) and the key's answer are not
// written one statement at a time: they are queued and sent with the
// COMMIT in one round trip (a pipeline; an error of any of them rolls the
// whole create back as before).
func (s *Service) Idempotent(ctx context.Context, p Principal, key, operation string, body []byte,
	create func(ctx context.Context, tx pgx.Tx) (*Answer, error)) (*Answer, error) {
	if len(key) > idempotency.MaxKeyLength {
		return nil, &InvalidError{Errors: []FieldError{{Header: "Idempotency-Key", Detail: fmt.Sprintf("at most %d characters", idempotency.MaxKeyLength)}}}
	}
	c := &idempotentCreate{}
	ctx = context.WithValue(ctx, idempotentCreateKey{}, c)
	out, err := s.idempotentTx(ctx, p, key, operation, body, create, c)
	if err != nil {
		return nil, err
	}
	if c.changed {
		// Committed: a failed wake-up is not the create's failure (the
		// followers catch up on their slow timer).
		if err := s.store.Wake(ctx); err != nil {
			s.logger.Warn("wake the followers of the definitions after a create", "operation", operation, "error", err)
		}
	}
	return out, nil
}

// idempotentTx runs Idempotent's transaction on a connection of its own:
// its BEGIN goes in one round trip with the key's claim (begin), its
// COMMIT in one with the last writes (commitWith). The connection is back
// in the pool when it returns: a connection left in a transaction (a
// panic, a failed rollback) is dropped by the pool.
func (s *Service) idempotentTx(ctx context.Context, p Principal, key, operation string, body []byte,
	create func(ctx context.Context, tx pgx.Tx) (*Answer, error), c *idempotentCreate) (*Answer, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: acquire a connection: %w", operation, err)
	}
	defer conn.Release()
	hash := ""
	if key != "" {
		hash = idempotency.Hash(operation, body)
	}
	tx, prior, err := begin(ctx, conn.Conn(), p.Owner, key, operation, hash)
	if err == nil {
		var out *Answer
		out, err = s.idempotentIn(ctx, tx, prior, p, key, operation, hash, create, c)
		if err == nil {
			if err = commitWith(ctx, conn.Conn(), &c.last); err == nil {
				return out, nil
			}
		}
	}
	if conn.Conn().PgConn().TxStatus() != 'I' {
		// A failed rollback closes the connection (pgx): nothing of the
		// create is kept either way.
		_, _ = conn.Exec(ctx, "ROLLBACK")
	}
	return nil, err
}

// begin opens a transaction on conn and, with a key, claims it: BEGIN,
// the key's lock and the read of its answer go in one round trip (pgx's
// Begin would wait for BEGIN's answer alone). It returns the transaction
// and the key's stored answer, if it has one (idempotency.Claimed).
func begin(ctx context.Context, conn *pgx.Conn, owner, key, operation, hash string) (pgx.Tx, *idempotency.Stored, error) {
	var b pgx.Batch
	b.Queue("BEGIN")
	if key != "" {
		if err := idempotency.QueueClaim(&b, owner, key); err != nil {
			return nil, nil, err
		}
	}
	br := conn.SendBatch(ctx, &b)
	_, err := br.Exec()
	if err != nil {
		_ = br.Close()
		return nil, nil, fmt.Errorf("%s: begin: %w", operation, err)
	}
	var prior *idempotency.Stored
	if key != "" {
		if prior, err = idempotency.Claimed(br, key, operation, hash); err != nil {
			_ = br.Close()
			return nil, nil, err
		}
	}
	if err := br.Close(); err != nil {
		return nil, nil, fmt.Errorf("%s: begin: %w", operation, err)
	}
	return db.OpenTx(conn), prior, nil
}

// idempotentIn is Idempotent's work in tx up to its commit: the key's
// stored answer (prior, read with the BEGIN), or create and the key with
// its answer queued in c.last.
func (s *Service) idempotentIn(ctx context.Context, tx pgx.Tx, prior *idempotency.Stored, p Principal, key, operation, hash string,
	create func(ctx context.Context, tx pgx.Tx) (*Answer, error), c *idempotentCreate) (*Answer, error) {
	if key != "" {
		if prior != nil {
			resp := prior.Response
			if prior.Sealed {
				plain, err := s.conf.Keys.Open(string(resp), "idempotency:"+p.Owner+":"+key)
				if err != nil {
					return nil, fmt.Errorf("open the stored answer of Idempotency-Key %q: %w", key, err)
				}
				resp = plain
			}
			return &Answer{Status: prior.Status, Body: resp, Replayed: true}, nil
		}
	}
	a, err := create(ctx, tx)
	if err != nil {
		return nil, err
	}
	if key == "" {
		return a, nil
	}
	stored := idempotency.Stored{Status: a.Status, Response: a.Body}
	if a.Secret {
		sealed, err := s.conf.Keys.Seal(a.Body, "idempotency:"+p.Owner+":"+key)
		if err != nil {
			return nil, err
		}
		stored.Response, stored.Sealed = []byte(sealed), true
	}
	idempotency.QueueSave(&c.last, p.Owner, key, operation, hash, stored)
	return a, nil
}

// commitWith sends last and a COMMIT in one round trip on conn, whose
// transaction is open: PostgreSQL runs them in order, and after an error
// skips the rest (the COMMIT too), leaving the transaction to roll back.
func commitWith(ctx context.Context, conn *pgx.Conn, last *pgx.Batch) error {
	last.Queue("COMMIT")
	br := conn.SendBatch(ctx, last)
	n := last.Len()
	for i := range n {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			if i == n-1 {
				return fmt.Errorf("commit: %w", err)
			}
			return fmt.Errorf("write the audit rows and the Idempotency-Key's answer: %w", err)
		}
		if i == n-1 && tag.String() != "COMMIT" {
			// PostgreSQL answers ROLLBACK to the COMMIT of a failed
			// transaction.
			_ = br.Close()
			return pgx.ErrTxCommitRollback
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// idempotentCreate is set in the context of Idempotent's create: the
// definitions it changes wake the followers after its commit (changed),
// and its last writes (audit rows, the key's answer) wait in last for the
// COMMIT.
type idempotentCreate struct {
	changed bool
	last    pgx.Batch
}

type idempotentCreateKey struct{}

// record writes an audit row of a change in tx: in an Idempotent create,
// queued to be sent with its COMMIT; elsewhere at once.
func (s *Service) record(ctx context.Context, tx pgx.Tx, e audit.Entry, before, after any) error {
	if c, ok := ctx.Value(idempotentCreateKey{}).(*idempotentCreate); ok {
		return audit.Queue(&c.last, e, before, after)
	}
	return audit.Record(ctx, tx, e, before, after)
}

// storeIn returns the definitions store in tx: Deferred when ctx is an
// Idempotent create's (which wakes the followers after its commit), else
// In (a NOTIFY that commits with tx).
func (s *Service) storeIn(ctx context.Context, tx pgx.Tx) *definitions.Store {
	if c, ok := ctx.Value(idempotentCreateKey{}).(*idempotentCreate); ok {
		c.changed = true
		return s.store.Deferred(tx)
	}
	return s.store.In(tx)
}
