package idempotency

// The named queries of the idempotency_keys table. Nothing outside this
// package writes it.

// queryClaim takes a key; status 0 and an empty response until Save.
const queryClaim = `
	INSERT INTO idempotency_keys (owner, key, operation, request_hash, status, response)
	VALUES ($1, $2, $3, $4, 0, '')
	ON CONFLICT (owner, key) DO NOTHING`

const queryRead = `
	SELECT operation, request_hash, status, response, sealed FROM idempotency_keys WHERE owner = $1 AND key = $2`

const querySave = `
	UPDATE idempotency_keys SET status = $3, response = $4, sealed = $5 WHERE owner = $1 AND key = $2`

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
