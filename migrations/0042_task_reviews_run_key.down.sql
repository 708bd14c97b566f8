ALTER TABLE task_reviews DROP CONSTRAINT task_reviews_task_run_id_fkey;
ALTER TABLE task_reviews ADD CONSTRAINT task_reviews_task_run_id_fkey
    FOREIGN KEY (task_run_id) REFERENCES task_runs (id) ON DELETE CASCADE;
ALTER TABLE task_runs DROP CONSTRAINT task_runs_id_source_key;
