package tokens

// The named queries of the api_tokens and sign_in_links tables. Nothing
// outside this package writes them (internal/retention prunes
// sign_in_links through PruneLinks).

const tokenColumns = `id, owner, scope, name, prefix, created_at, expires_at, revoked_at, last_used_at`

const queryCreate = `
	INSERT INTO api_tokens (owner, scope, name, prefix, hash, expires_at)
	VALUES ($1, $2, $3, $4, $5, $6)
	RETURNING ` + tokenColumns

const queryByHash = `SELECT ` + tokenColumns + `, hash FROM api_tokens WHERE hash = $1`

const queryTouch = `UPDATE api_tokens SET last_used_at = now() WHERE id = $1`

const queryRevoke = `
	UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
	WHERE id = $1 AND ($2 = '' OR owner = $2)
	RETURNING ` + tokenColumns

const queryList = `SELECT ` + tokenColumns + ` FROM api_tokens WHERE $1 = '' OR owner = $1 ORDER BY id`

const queryByID = `SELECT ` + tokenColumns + `, hash FROM api_tokens WHERE id = $1`

// The named queries of the sign_in_links table (link.go). Nothing outside
// this package writes it.

const queryCreateLink = `
	INSERT INTO sign_in_links (hash, token_id, owner, created_at, expires_at)
	VALUES ($1, $2, $3, $4, $5)
	RETURNING id, token_id, owner, created_at, expires_at, used_at`

// queryLockLink reads a link by its hash and locks it until the
// transaction ends: two redemptions of one link queue, and the second sees
// used_at.
const queryLockLink = `
	SELECT id, token_id, owner, created_at, expires_at, used_at
	FROM sign_in_links WHERE hash = $1 FOR UPDATE`

const queryUseLink = `UPDATE sign_in_links SET used_at = $2 WHERE id = $1 AND used_at IS NULL`

// queryPruneLinks deletes up to $2 sign-in links that expired or were
// used before $1 (sign_in_links_expires_idx, sign_in_links_used_idx).
const queryPruneLinks = `
	DELETE FROM sign_in_links WHERE id = ANY (ARRAY(
	    SELECT id FROM sign_in_links
	    WHERE expires_at < $1 OR used_at < $1
	    ORDER BY id
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

// queryCountPrunableLinks counts what queryPruneLinks deletes.
const queryCountPrunableLinks = `SELECT count(*) FROM sign_in_links WHERE expires_at < $1 OR used_at < $1`
