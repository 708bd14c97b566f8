DROP INDEX task_runs_record_id_idx;
DROP INDEX task_runs_status_updated_idx;
DROP INDEX task_runs_source_updated_idx;
