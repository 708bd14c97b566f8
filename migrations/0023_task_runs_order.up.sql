-- Task runs newest first by source and by status (syncer tasks SOURCE,
-- report_task_runs and the admin's task runs page with its filters), read
-- through an index in the views' order (updated_at DESC, id DESC) and
-- stopped at the limit instead of sorting the source's or the status's
-- runs (migration 21 made task_runs_updated_idx for the unfiltered list);
-- a record's runs by record_id alone (the admin's record filter names no
-- source).
CREATE INDEX task_runs_source_updated_idx ON task_runs (source, updated_at DESC, id DESC);
CREATE INDEX task_runs_status_updated_idx ON task_runs (status, updated_at DESC, id DESC);
CREATE INDEX task_runs_record_id_idx ON task_runs (record_id);
