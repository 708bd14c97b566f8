CREATE OR REPLACE VIEW report_dead_letters AS
SELECT id, sink, source, watch, record_id, dedupe_key, kind, title, attempts, last_error,
       created_at, last_attempt_at, dead_at, manual_retries
FROM notifications
WHERE status = 'dead'
ORDER BY dead_at DESC NULLS LAST, id DESC;
DROP VIEW IF EXISTS report_expensive_evaluations;
CREATE VIEW report_expensive_evaluations AS
SELECT mc.id AS model_call_id, mc.created_at, mc.purpose, mc.source, mc.watch, mc.record_id, mc.change_id,
       mc.model, mc.model_digest, mc.prompt_version, mc.outcome, mc.attempt, mc.latency_ms,
       mc.prompt_tokens, mc.output_tokens, mc.prompt_tokens + mc.output_tokens AS total_tokens,
       e.decision, e.reason
FROM model_calls mc
LEFT JOIN evaluations e ON e.model_call_id = mc.id AND e.change_id = mc.change_id AND e.step = 'model'
ORDER BY mc.latency_ms DESC, mc.prompt_tokens + mc.output_tokens DESC;
COMMENT ON VIEW report_expensive_evaluations IS 'model calls, slowest first, with tokens, outcome and the decision they led to';
DROP INDEX IF EXISTS notifications_owner_idx;
ALTER TABLE model_calls DROP COLUMN IF EXISTS owner;
ALTER TABLE notifications DROP COLUMN IF EXISTS owner;
ALTER TABLE evaluations DROP COLUMN IF EXISTS owner;
DROP TABLE IF EXISTS definition_deletions;
DROP TABLE IF EXISTS watches;
DROP TABLE IF EXISTS source_definitions;
DROP TABLE IF EXISTS config_version;
