package drift

// The named queries of drift_embeddings and model_versions, the two
// tables this package owns.

// queryFeed copies the model answers with a reason that are not queued
// yet, oldest first, from a lookback before the newest one queued (model
// calls are written right after the call, outside any transaction, so a
// call commits within moments of its created_at: the lookback covers the
// ones that commit out of order). $1 lookback, $2 batch.
//
// The calls queued already are read by an uncorrelated NOT IN of the
// queue's rows in the same window (a row's call_created_at is its call's
// created_at), not by a NOT EXISTS correlated with the call: on Citus
// (docs/scaling.md "On Citus") model_calls is distributed and
// drift_embeddings a local table of the coordinator, and Citus refuses
// the correlated form ("direct joins between distributed and local tables
// are not supported"); it reads the uncorrelated one on the coordinator
// first. model_call_id is never NULL (the queue's key).
const queryFeed = `
INSERT INTO drift_embeddings (model_call_id, call_created_at, source, watch, owner, model, model_digest, reason)
SELECT mc.id, mc.created_at, mc.source, mc.watch, mc.owner, mc.model, mc.model_digest, mc.reason
FROM model_calls mc
WHERE mc.created_at >= coalesce((SELECT max(call_created_at) FROM drift_embeddings) - $1::interval, '-infinity')
  AND mc.outcome = 'ok' AND mc.purpose NOT IN ('replay', 'briefing') AND coalesce(mc.reason, '') <> ''
  AND mc.id NOT IN (SELECT d.model_call_id FROM drift_embeddings d
                    WHERE d.call_created_at >= coalesce((SELECT max(call_created_at) FROM drift_embeddings) - $1::interval, '-infinity'))
ORDER BY mc.created_at, mc.id
LIMIT $2
ON CONFLICT (model_call_id) DO NOTHING
RETURNING model_call_id, call_created_at, model, model_digest`

// queryLockVersions serializes the replicas that record model versions,
// so that one digest change is one row.
const queryLockVersions = `LOCK TABLE model_versions IN SHARE ROW EXCLUSIVE MODE`

// queryRecordVersion records digest $2 of model $1 seen at $3 when the
// last recorded digest of the model is another one (or none).
const queryRecordVersion = `
INSERT INTO model_versions (model, digest, seen_at)
SELECT $1, $2, $3
WHERE $2 <> '' AND NOT EXISTS (
    SELECT 1 FROM (SELECT digest FROM model_versions WHERE model = $1 ORDER BY seen_at DESC, id DESC LIMIT 1) l
    WHERE l.digest = $2)
RETURNING id`

// queryClaim leases up to $3 pending rows that are due to replica $1
// for $2.
const queryClaim = `
UPDATE drift_embeddings d
SET claimed_by = $1, claimed_until = now() + $2::interval, attempts = d.attempts + 1
FROM (SELECT model_call_id FROM drift_embeddings
      WHERE state = 'pending' AND next_at <= now() AND (claimed_until IS NULL OR claimed_until < now())
      ORDER BY next_at, model_call_id
      LIMIT $3
      FOR UPDATE SKIP LOCKED) c
WHERE d.model_call_id = c.model_call_id
RETURNING d.model_call_id, d.reason, d.attempts`

// queryStore writes the embedding of a row claimed by $2 (fenced: a row
// another replica took over after the lease is left to it).
const queryStore = `
UPDATE drift_embeddings
SET state = 'embedded', embedding = $3::real[], embed_model = $4, embed_digest = $5, embedded_at = now(),
    claimed_by = NULL, claimed_until = NULL, last_error = NULL
WHERE model_call_id = $1 AND claimed_by = $2 AND state = 'pending'`

// queryHold gives back rows claimed by $2 that could not be embedded:
// still pending, due again after $3, with the error.
const queryHold = `
UPDATE drift_embeddings
SET claimed_by = NULL, claimed_until = NULL, next_at = now() + $3::interval, last_error = $4
WHERE model_call_id = ANY($1) AND claimed_by = $2 AND state = 'pending'`

// queryQueue counts the queue: pending rows, of which held (tried and
// failed), and embedded rows.
const queryQueue = `
SELECT count(*) FILTER (WHERE state = 'pending'),
       count(*) FILTER (WHERE state = 'pending' AND attempts > 0 AND claimed_until IS NULL),
       count(*) FILTER (WHERE state = 'embedded')
FROM drift_embeddings`

// queryWatches lists the watches with embeddings of model $1 in
// [$2, $3), narrowed to source $4, watch $5 and owner $6 when not ”.
const queryWatches = `
SELECT source, watch, max(owner)
FROM drift_embeddings
WHERE state = 'embedded' AND embed_model = $1 AND call_created_at >= $2 AND call_created_at < $3
  AND ($4 = '' OR source = $4) AND ($5 = '' OR watch = $5) AND ($6 = '' OR owner = $6)
GROUP BY source, watch
ORDER BY source, watch`

// queryFirstWeek is the first week (Monday 00:00 UTC) of a watch with
// at least $4 embeddings of model $3: its default baseline.
const queryFirstWeek = `
SELECT date_trunc('week', call_created_at, 'UTC') AS week
FROM drift_embeddings
WHERE source = $1 AND watch = $2 AND state = 'embedded' AND embed_model = $3
GROUP BY 1
HAVING count(*) >= $4
ORDER BY 1
LIMIT 1`

// queryVectors streams a watch's embeddings of model $3 in [$4, $5)
// with their week.
const queryVectors = `
SELECT date_trunc('week', call_created_at, 'UTC') AS week, embedding
FROM drift_embeddings
WHERE source = $1 AND watch = $2 AND state = 'embedded' AND embed_model = $3
  AND call_created_at >= $4 AND call_created_at < $5`

// queryRates counts a watch's model-judged decisions (evaluations of
// step model or cache) per week in [$3, $4): the rates already recorded
// (report_model_drift's, per week).
const queryRates = `
SELECT date_trunc('week', created_at, 'UTC') AS week, count(*), count(*) FILTER (WHERE decision = 'notify')
FROM evaluations
WHERE source = $1 AND watch = $2 AND step IN ('model', 'cache') AND created_at >= $3 AND created_at < $4
GROUP BY 1`

// queryVersionChanges lists the digest changes in [$2, $3) of the models
// that answered watch ($4, $5) or of the embedding model $1: the rows of
// model_versions that have a previous row.
const queryVersionChanges = `
SELECT model, previous, digest, seen_at FROM (
    SELECT model, digest, seen_at, id, lag(digest) OVER (PARTITION BY model ORDER BY seen_at, id) AS previous
    FROM model_versions
    WHERE model = $1 OR model IN (SELECT DISTINCT model FROM drift_embeddings WHERE source = $4 AND watch = $5)
) v
WHERE previous IS NOT NULL AND seen_at >= $2 AND seen_at < $3
ORDER BY seen_at, id`

// queryPrune deletes at most $2 embedded rows whose decision was made
// before $1; a pending row (waiting or held) never is.
const queryPrune = `
DELETE FROM drift_embeddings WHERE model_call_id IN (
    SELECT model_call_id FROM drift_embeddings
    WHERE state = 'embedded' AND call_created_at < $1
    ORDER BY call_created_at
    LIMIT $2)`

// queryCountPrunable counts the rows queryPrune would delete.
const queryCountPrunable = `SELECT count(*) FROM drift_embeddings WHERE state = 'embedded' AND call_created_at < $1`
