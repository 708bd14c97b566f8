-- Back to version 56: the evaluations' hourly activity and model drift
-- counted by the statement triggers of migrations 18 and 44 (their
-- functions, which also serve the update triggers, were kept).
DROP FUNCTION count_evaluations(timestamptz[], text[], text[], text[], float8[], bigint[]);

CREATE TRIGGER evaluations_activity_insert AFTER INSERT ON evaluations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_hour_totals_evaluations();
CREATE TRIGGER evaluations_model_drift_insert AFTER INSERT ON evaluations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION model_drift_days_evaluations();
