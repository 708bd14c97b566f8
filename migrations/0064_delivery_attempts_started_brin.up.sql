-- lookout schema, version 64: delivery_attempts_started_idx (started_at),
-- a B-tree from migration 39, becomes a BRIN index of the same name. Its
-- one reader is retention's prune (outbox.PruneAttempts: the attempts that
-- started before the cutoff, in no particular order since this version),
-- and attempts are appended in the order they start, give or take the
-- seconds one attempt takes, so a block range's summary bounds its rows
-- closely. Every attempt entered the B-tree: one index entry of the six
-- that recording a delivery writes on the common success path (the
-- notification's three, the attempt's primary key, its
-- (notification_id, attempt) and this one); an insert into the table's
-- last block ranges, which are not summarized until a vacuum does it,
-- writes nothing to a BRIN index (docs/benchmarks.md, (5) on branch
-- deliver-ratio4). On Citus the DROP and the CREATE reach every shard.
DROP INDEX IF EXISTS delivery_attempts_started_idx;
CREATE INDEX delivery_attempts_started_idx ON delivery_attempts USING brin (started_at);
