-- lookout schema, version 42: a task review names its run by (id, source).
-- On Citus (docs/scaling.md "On Citus") task_runs and task_reviews are
-- distributed by source in the co-location group of sources, and Citus
-- enforces a key, and accepts a foreign key between two distributed
-- tables, only when it holds the distribution column: the key of
-- task_runs by id alone gains source there (db.Distribute), which the
-- foreign key by task_run_id alone forbade ("cannot drop constraint
-- task_runs_pkey ... because other objects depend on it"). A review's
-- source is its run's (the task runner writes it from the run), so the
-- foreign key by (task_run_id, source) accepts and refuses the same rows.
ALTER TABLE task_runs ADD CONSTRAINT task_runs_id_source_key UNIQUE (id, source);
ALTER TABLE task_reviews DROP CONSTRAINT task_reviews_task_run_id_fkey;
ALTER TABLE task_reviews ADD CONSTRAINT task_reviews_task_run_id_fkey
    FOREIGN KEY (task_run_id, source) REFERENCES task_runs (id, source) ON DELETE CASCADE;
