DROP TABLE IF EXISTS briefings;
DELETE FROM model_calls WHERE purpose = 'briefing';
ALTER TABLE model_calls DROP CONSTRAINT model_calls_purpose_check;
ALTER TABLE model_calls ADD CONSTRAINT model_calls_purpose_check
    CHECK (purpose IN ('evaluate', 'replay'));
