-- lookout schema, version 10: a quiet run costs almost nothing.
--
-- A run that changed nothing and failed nothing (a scheduled run answered
-- 304, or whose items were all unchanged) writes no sync_runs row: its
-- completion updates the source's row, in a batch with others, and counts
-- it in the source's hour here. Runs that changed something, failed, were
-- deferred, manual or taken over, or lasted long enough to renew their
-- lease keep their sync_runs row. See docs/acquisition.md#quiet-runs and
-- docs/cookbook.md (what did it run?).
CREATE TABLE sync_run_hours (
    source               text             NOT NULL,  -- sources.name (no FK: see records)
    hour                 timestamptz      NOT NULL,  -- start of the UTC hour the runs started in
    runs                 integer          NOT NULL DEFAULT 0,  -- quiet runs
    not_modified         integer          NOT NULL DEFAULT 0,  -- of which the upstream answered "not modified" (304)
    requests             integer          NOT NULL DEFAULT 0,  -- upstream requests they made
    items_seen           bigint           NOT NULL DEFAULT 0,  -- items they read (all unchanged)
    rate_limit_waits     integer          NOT NULL DEFAULT 0,
    first_started_at     timestamptz      NOT NULL,
    last_started_at      timestamptz      NOT NULL,
    last_finished_at     timestamptz      NOT NULL,
    duration_ms_sum      double precision NOT NULL DEFAULT 0,  -- claim to completion, summed
    lateness_seconds_sum double precision NOT NULL DEFAULT 0,  -- start minus due time, summed
    lateness_seconds_max double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (source, hour)
) WITH (fillfactor = 70);

-- Runs of a time window across sources ("what ran in the last 24 hours?").
CREATE INDEX sync_run_hours_hour_idx ON sync_run_hours (hour);

-- Every run rewrites its source's row twice (claim, completion): leave
-- room on each page so the new version stays on it (a HOT update, no new
-- index entries when no indexed column changed), and vacuum often.
ALTER TABLE sources SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
