DROP INDEX IF EXISTS notifications_dead_unalerted_idx;
ALTER TABLE notifications DROP COLUMN IF EXISTS dead_alerted_at;

-- Version 5 knows no alerts: drop them (they were about problems of the
-- time; the watchdog of version 6 raises them again when still current).
DELETE FROM notifications WHERE kind = 'alert';
ALTER TABLE notifications DROP CONSTRAINT notifications_kind_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_kind_check
    CHECK (kind IN ('single', 'digest'));
