DROP INDEX notifications_due_idx;
CREATE INDEX notifications_due_idx ON notifications (sink, next_attempt_at) WHERE status = 'pending';
