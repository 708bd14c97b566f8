package idempotency

// The named queries of the idempotency_keys table. Nothing outside this
// package writes it.

// queryLock takes a key for the rest of the transaction: a concurrent
// request with the same key waits here until the first commits (then
// queryRead finds its answer) or rolls back. Two keys whose hashes meet
// only wait for each other.
const queryLock = `
	SELECT pg_advisory_xact_lock(hashtextextended('lookout.idempotency:' || $1 || ':' || $2, 0))`

// queryRead is the key's answer, if it has one; sent after queryLock, it
// sees what the key's holder before it committed.
const queryRead = `
	SELECT operation, request_hash, status, response, sealed FROM idempotency_keys WHERE owner = $1 AND key = $2`

// querySave writes the key with its answer, in the transaction that holds
// the key (queryLock) and found no answer (queryRead).
const querySave = `
	INSERT INTO idempotency_keys (owner, key, operation, request_hash, status, response, sealed)
	VALUES ($1, $2, $3, $4, $5, $6, $7)`

// queryPrune deletes up to $2 keys made before $1. It reads
// idempotency_keys_created_idx. $3 restricts it to the keys of those
// owners (NULL: every owner): on Citus, where the table is distributed by
// owner, it runs once per shard of its candidates (queryPruneCandidates,
// db.PruneEachShard), a router statement, where Citus takes row locks and
// a ctid is one shard's.
const queryPrune = `
	DELETE FROM idempotency_keys WHERE ($3::text[] IS NULL OR owner = ANY($3::text[])) AND ctid = ANY (ARRAY(
	    SELECT ctid FROM idempotency_keys
	    WHERE created_at < $1 AND ($3::text[] IS NULL OR owner = ANY($3::text[]))
	    ORDER BY created_at
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

// queryPruneCandidates is queryPrune's pick without its locks: the owner
// of each key it would delete now, in its order.
const queryPruneCandidates = `
	SELECT owner FROM idempotency_keys WHERE created_at < $1 ORDER BY created_at LIMIT $2`

// queryCountExpired counts what queryPrune deletes.
const queryCountExpired = `SELECT count(*) FROM idempotency_keys WHERE created_at < $1`
