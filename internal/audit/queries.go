package audit

// The named queries of the audit_log table. Nothing outside this package
// writes it; internal/retention prunes it by age through Prune.

const queryInsert = `
	INSERT INTO audit_log (actor, token_id, via, action, kind, target, owner, before, after, request_id)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULLIF($10, ''))`

const queryList = `
	SELECT id, at, actor, token_id, via, action, kind, target, owner, before, after, request_id
	FROM audit_log
	WHERE ($1 = '' OR owner = $1) AND ($2 = '' OR kind = $2) AND ($3 = '' OR target = $3)
	  AND ($4 = 0 OR id < $4)
	ORDER BY id DESC LIMIT $5`

// queryPrune deletes up to $2 entries recorded before $1. It reads
// audit_log_at_idx. $3 restricts it to the entries of those owners (NULL:
// every owner): on Citus, where the table is distributed by owner, it runs
// once per shard of its candidates (queryPruneCandidates,
// db.PruneEachShard), a router statement, where Citus takes row locks.
const queryPrune = `
	DELETE FROM audit_log WHERE ($3::text[] IS NULL OR owner = ANY($3::text[])) AND id = ANY (ARRAY(
	    SELECT id FROM audit_log
	    WHERE at < $1 AND ($3::text[] IS NULL OR owner = ANY($3::text[]))
	    ORDER BY at
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

// queryPruneCandidates is queryPrune's pick without its locks: the owner
// of each entry it would delete now, in its order.
const queryPruneCandidates = `SELECT owner FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2`

// queryCountPrunable counts what queryPrune deletes.
const queryCountPrunable = `SELECT count(*) FROM audit_log WHERE at < $1`
