-- Back to version 26: the changes' hourly activity counted by the statement
-- trigger of migration 18.
CREATE FUNCTION activity_hour_totals_changes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, pg_backend_pid(), sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.created_at, 'UTC') AS hour, 0::bigint AS runs, 0::bigint AS failed_runs, 0::bigint AS timed_runs, +(0)::float8 AS lateness_seconds_sum, (0)::float8 AS lateness_seconds_max, 1::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM new_rows r) d
        GROUP BY d.hour
        ON CONFLICT (hour, backend) DO UPDATE SET
            runs = t.runs + excluded.runs,
            failed_runs = t.failed_runs + excluded.failed_runs,
            timed_runs = t.timed_runs + excluded.timed_runs,
            lateness_seconds_sum = t.lateness_seconds_sum + excluded.lateness_seconds_sum,
            lateness_seconds_max = greatest(t.lateness_seconds_max, excluded.lateness_seconds_max),
            changes = t.changes + excluded.changes,
            evaluations = t.evaluations + excluded.evaluations,
            notify_decisions = t.notify_decisions + excluded.notify_decisions,
            notifications = t.notifications + excluded.notifications,
            model_calls = t.model_calls + excluded.model_calls,
            failed_model_calls = t.failed_model_calls + excluded.failed_model_calls;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER changes_activity_insert AFTER INSERT ON changes
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_hour_totals_changes();
