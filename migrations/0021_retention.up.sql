-- lookout schema, version 21: every table that grows with time has a
-- retention window (docs/config.md#retention). The pruner deletes their old
-- rows in batches through each table's owner; these indexes let every batch
-- read only the rows it deletes (internal/reports' plans test keeps them
-- used). Pending work is never in an index here, or is filtered out by it.

-- model_budgets: the days before the window (never the current UTC day).
CREATE INDEX model_budgets_day_idx ON model_budgets (day);

-- briefings: finished briefings by last use (a claim being written is not
-- in the index).
CREATE INDEX briefings_unused_idx ON briefings ((coalesce(last_hit_at, updated_at))) WHERE state <> 'writing';

-- verdicts: by creation (a column that never changes, so a cache hit, which
-- sets last_hit_at, stays a HOT update); the prune skips verdicts hit
-- within the window.
CREATE INDEX verdicts_created_idx ON verdicts (created_at);

-- inbound_events: processed events by arrival (unprocessed ones are not in
-- the index).
CREATE INDEX inbound_events_processed_idx ON inbound_events (received_at) WHERE processed_at IS NOT NULL;

-- definition_deletions: by when the definition was deleted.
CREATE INDEX definition_deletions_deleted_idx ON definition_deletions (deleted_at);

-- task_runs: finished runs that will not be tried again and whose state the
-- tool already shows, by when they finished.
CREATE INDEX task_runs_finished_idx ON task_runs (finished_at)
    WHERE tool_action IS NULL
      AND (status IN ('completed', 'failed') OR (status IN ('released', 'lost', 'expired') AND retry_at IS NULL));

-- report_task_runs' order (updated_at DESC, id DESC), which the admin
-- page's task runs list reads a page of: without it a page sorts the
-- whole table.
CREATE INDEX task_runs_updated_idx ON task_runs (updated_at DESC, id DESC);

-- audit_log: by time.
CREATE INDEX audit_log_at_idx ON audit_log (at);

-- The highest version of a definition deletion pruned: a follower that
-- applied an older version may have missed a deletion, and loads the
-- definitions whole instead of catching up (internal/definitions).
ALTER TABLE config_version ADD COLUMN deletions_pruned_through bigint NOT NULL DEFAULT 0;
