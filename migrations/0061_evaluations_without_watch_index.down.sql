CREATE INDEX IF NOT EXISTS evaluations_watch_created_idx ON evaluations (watch, created_at);
