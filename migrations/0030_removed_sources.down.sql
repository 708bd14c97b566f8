UPDATE sources SET status = 'completed', status_reason = coalesce(status_reason, 'removed') WHERE status = 'removed';
ALTER TABLE sources DROP CONSTRAINT sources_status_check;
ALTER TABLE sources ADD CONSTRAINT sources_status_check
    CHECK (status IN ('active', 'paused', 'disabled', 'completed'));
