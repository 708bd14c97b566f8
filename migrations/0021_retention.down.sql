ALTER TABLE config_version DROP COLUMN deletions_pruned_through;
DROP INDEX audit_log_at_idx;
DROP INDEX task_runs_updated_idx;
DROP INDEX task_runs_finished_idx;
DROP INDEX definition_deletions_deleted_idx;
DROP INDEX inbound_events_processed_idx;
DROP INDEX verdicts_created_idx;
DROP INDEX briefings_unused_idx;
DROP INDEX model_budgets_day_idx;
