DROP VIEW IF EXISTS report_model_usage;
DROP VIEW IF EXISTS report_expensive_evaluations;
DROP VIEW IF EXISTS report_model_drift;
DROP INDEX IF EXISTS evaluations_model_call_idx;
DROP TABLE IF EXISTS verdicts;
DROP TABLE IF EXISTS model_calls;
