-- lookout schema, version 24: quiet-run counts are written once per
-- syncer.rollup_every (docs/acquisition.md#quiet-runs), which updates every
-- row of the current hour at once. Leave room on each page for a new
-- version of every row, so that each update stays on its page (HOT: no new
-- index entries, the old version pruned at the next write), and vacuum the
-- table often enough that the room comes back between writes.
ALTER TABLE sync_run_hours SET (fillfactor = 45, autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
