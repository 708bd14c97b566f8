DROP VIEW IF EXISTS report_webhook_health;
ALTER TABLE sources DROP COLUMN IF EXISTS webhook, DROP COLUMN IF EXISTS silence_alert_seconds;
ALTER TABLE sync_runs DROP COLUMN IF EXISTS repaired;
DROP TABLE IF EXISTS inbound_events;
