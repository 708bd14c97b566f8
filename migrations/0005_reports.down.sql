COMMENT ON VIEW report_model_usage IS NULL;
COMMENT ON VIEW report_model_drift IS NULL;
COMMENT ON VIEW report_expensive_evaluations IS NULL;
COMMENT ON VIEW report_delivery_status IS NULL;
COMMENT ON VIEW report_duplicates_suppressed IS NULL;
COMMENT ON VIEW report_dead_letters IS NULL;

DROP VIEW IF EXISTS report_overview;
DROP VIEW IF EXISTS report_ran_twice;
DROP VIEW IF EXISTS report_disabled_sources;
DROP VIEW IF EXISTS report_high_retry;
DROP VIEW IF EXISTS report_recent_failures;
DROP VIEW IF EXISTS report_stuck;
DROP VIEW IF EXISTS report_active_sources;

DROP INDEX IF EXISTS verdicts_model_call_idx;
DROP INDEX IF EXISTS notifications_failed_idx;
DROP INDEX IF EXISTS evaluations_failed_idx;
DROP INDEX IF EXISTS sync_runs_failed_idx;
DROP INDEX IF EXISTS sync_runs_started_idx;
DROP INDEX IF EXISTS sources_run_requested_idx;
DROP INDEX IF EXISTS changes_run_brin;
DROP INDEX IF EXISTS changes_pending_record_idx;

ALTER TABLE sync_runs
    DROP COLUMN IF EXISTS due_reason,
    DROP COLUMN IF EXISTS due_at;
