DROP INDEX IF EXISTS delivery_attempts_started_idx;
CREATE INDEX delivery_attempts_started_idx ON delivery_attempts (started_at);
