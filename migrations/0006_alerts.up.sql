-- Alerts: the watchdog of the evaluator daemon writes an alert as a
-- notifications row of kind 'alert' (stale source, stuck run, dead
-- letters, disabled source), so that delivery, retries, dead letters and
-- dedupe keys work for alerts as for any notification. See
-- docs/observability.md.
ALTER TABLE notifications DROP CONSTRAINT notifications_kind_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_kind_check
    CHECK (kind IN ('single', 'digest', 'alert'));

-- Dead rows: when the watchdog raised the alert that covers this dead
-- letter; NULL while it has not (the deliverer clears it whenever a row
-- becomes dead, so a row sent back by retry-dead that dies again is
-- alerted again). Alert rows themselves are never alerted about: an alert
-- to a dead sink must not raise an alert to that sink, and so on.
ALTER TABLE notifications ADD COLUMN dead_alerted_at timestamptz;

-- The watchdog's question, every interval: dead letters not yet alerted.
CREATE INDEX notifications_dead_unalerted_idx ON notifications (sink)
    WHERE status = 'dead' AND dead_alerted_at IS NULL AND kind <> 'alert';
