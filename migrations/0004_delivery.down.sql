DROP VIEW IF EXISTS report_delivery_status;
DROP VIEW IF EXISTS report_duplicates_suppressed;
DROP VIEW IF EXISTS report_dead_letters;

DROP INDEX IF EXISTS notifications_digest_idx;
DROP INDEX IF EXISTS notifications_dead_idx;
DROP INDEX IF EXISTS notifications_held_idx;
DROP INDEX IF EXISTS notifications_due_idx;
CREATE INDEX notifications_due_idx ON notifications (next_attempt_at) WHERE status = 'pending';

-- Held digest members go out one by one under version 1.
UPDATE notifications SET status = 'pending', next_attempt_at = now() WHERE status = 'held';
ALTER TABLE notifications DROP CONSTRAINT notifications_status_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_status_check
    CHECK (status IN ('pending', 'delivered', 'dead', 'digested'));

ALTER TABLE notifications
    DROP COLUMN manual_retries,
    DROP COLUMN last_duplicate_at,
    DROP COLUMN dead_at,
    DROP COLUMN last_attempt_at,
    DROP COLUMN digest_count,
    DROP COLUMN digest_id,
    DROP COLUMN digest_due_at,
    DROP COLUMN kind;
