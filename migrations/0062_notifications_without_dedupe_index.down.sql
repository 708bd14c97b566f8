CREATE INDEX IF NOT EXISTS notifications_dedupe_idx ON notifications (dedupe_key, sink);
