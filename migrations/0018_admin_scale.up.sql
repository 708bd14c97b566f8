-- lookout schema, version 18: the admin page at scale, and owners.
--
-- What happened per hour across the system — runs (recorded and quiet),
-- failed runs, lateness, changes, evaluations, notify decisions,
-- notifications, model calls — summed as it happens, so that the overview's
-- charts read 24 rows per writer instead of a day of history (100,000
-- sources make 2.4 million sync_run_hours rows a day; 10 million changes
-- over 30 days make 330,000 a day). Statement triggers on the tables add
-- each statement's rows to its hours, one row per hour and database
-- backend (pg_backend_pid()), so that concurrent writers never wait on each
-- other's row; report_activity_hourly sums them. Updates that change what
-- is counted (a run's status, a held evaluation decided, a quiet run added
-- to its hour) add the difference. Deletes (retention) are not subtracted:
-- the view reads the last 24 hours, which retention never prunes.
CREATE TABLE activity_hour_totals (
    hour                 timestamptz      NOT NULL,  -- start of the UTC hour
    backend              integer          NOT NULL,  -- pg_backend_pid() of the writer (0: summed by this migration)
    runs                 bigint           NOT NULL DEFAULT 0,  -- recorded runs (sync_runs) and quiet runs (sync_run_hours) started in the hour
    failed_runs          bigint           NOT NULL DEFAULT 0,  -- failed, deferred or abandoned
    timed_runs           bigint           NOT NULL DEFAULT 0,  -- runs with a due time: what lateness averages over
    lateness_seconds_sum double precision NOT NULL DEFAULT 0,  -- start minus due time, summed
    lateness_seconds_max double precision NOT NULL DEFAULT 0,
    changes              bigint           NOT NULL DEFAULT 0,
    evaluations          bigint           NOT NULL DEFAULT 0,
    notify_decisions     bigint           NOT NULL DEFAULT 0,
    notifications        bigint           NOT NULL DEFAULT 0,
    model_calls          bigint           NOT NULL DEFAULT 0,
    failed_model_calls   bigint           NOT NULL DEFAULT 0,
    PRIMARY KEY (hour, backend)
);

CREATE FUNCTION activity_hour_totals_sync_run_hours() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, pg_backend_pid(), sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT r.hour AS hour, +(r.runs)::bigint AS runs, 0::bigint AS failed_runs, +(r.runs)::bigint AS timed_runs, +(r.lateness_seconds_sum)::float8 AS lateness_seconds_sum, (r.lateness_seconds_max)::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM new_rows r) d
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
    ELSE
        INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, pg_backend_pid(), sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT r.hour AS hour, +(r.runs)::bigint AS runs, 0::bigint AS failed_runs, +(r.runs)::bigint AS timed_runs, +(r.lateness_seconds_sum)::float8 AS lateness_seconds_sum, (r.lateness_seconds_max)::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM new_rows r
            UNION ALL
            SELECT r.hour AS hour, -(r.runs)::bigint AS runs, 0::bigint AS failed_runs, -(r.runs)::bigint AS timed_runs, -(r.lateness_seconds_sum)::float8 AS lateness_seconds_sum, 0::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM old_rows r) d
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

CREATE FUNCTION activity_hour_totals_sync_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, pg_backend_pid(), sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.started_at, 'UTC') AS hour, 1::bigint AS runs, ((r.status IN ('failed', 'deferred', 'abandoned'))::int)::bigint AS failed_runs, ((r.due_at IS NOT NULL)::int)::bigint AS timed_runs, (coalesce(greatest(extract(epoch FROM r.started_at - r.due_at), 0), 0))::float8 AS lateness_seconds_sum, (coalesce(greatest(extract(epoch FROM r.started_at - r.due_at), 0), 0))::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM new_rows r) d
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
    ELSE
        INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, pg_backend_pid(), sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.started_at, 'UTC') AS hour, 1::bigint AS runs, ((r.status IN ('failed', 'deferred', 'abandoned'))::int)::bigint AS failed_runs, ((r.due_at IS NOT NULL)::int)::bigint AS timed_runs, (coalesce(greatest(extract(epoch FROM r.started_at - r.due_at), 0), 0))::float8 AS lateness_seconds_sum, (coalesce(greatest(extract(epoch FROM r.started_at - r.due_at), 0), 0))::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM new_rows r
            UNION ALL
            SELECT date_trunc('hour', r.started_at, 'UTC') AS hour, -1::bigint AS runs, -((r.status IN ('failed', 'deferred', 'abandoned'))::int)::bigint AS failed_runs, -((r.due_at IS NOT NULL)::int)::bigint AS timed_runs, -(coalesce(greatest(extract(epoch FROM r.started_at - r.due_at), 0), 0))::float8 AS lateness_seconds_sum, 0::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM old_rows r) d
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

CREATE FUNCTION activity_hour_totals_evaluations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, pg_backend_pid(), sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.created_at, 'UTC') AS hour, 0::bigint AS runs, 0::bigint AS failed_runs, 0::bigint AS timed_runs, +(0)::float8 AS lateness_seconds_sum, (0)::float8 AS lateness_seconds_max, 0::bigint AS changes, 1::bigint AS evaluations, ((r.decision = 'notify')::int)::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM new_rows r) d
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
    ELSE
        INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, pg_backend_pid(), sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.created_at, 'UTC') AS hour, 0::bigint AS runs, 0::bigint AS failed_runs, 0::bigint AS timed_runs, +(0)::float8 AS lateness_seconds_sum, (0)::float8 AS lateness_seconds_max, 0::bigint AS changes, 1::bigint AS evaluations, ((r.decision = 'notify')::int)::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM new_rows r
            UNION ALL
            SELECT date_trunc('hour', r.created_at, 'UTC') AS hour, 0::bigint AS runs, 0::bigint AS failed_runs, 0::bigint AS timed_runs, -(0)::float8 AS lateness_seconds_sum, 0::float8 AS lateness_seconds_max, 0::bigint AS changes, -1::bigint AS evaluations, -((r.decision = 'notify')::int)::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM old_rows r) d
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

CREATE FUNCTION activity_hour_totals_notifications() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, pg_backend_pid(), sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.created_at, 'UTC') AS hour, 0::bigint AS runs, 0::bigint AS failed_runs, 0::bigint AS timed_runs, +(0)::float8 AS lateness_seconds_sum, (0)::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 1::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM new_rows r) d
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

CREATE FUNCTION activity_hour_totals_model_calls() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, pg_backend_pid(), sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.created_at, 'UTC') AS hour, 0::bigint AS runs, 0::bigint AS failed_runs, 0::bigint AS timed_runs, +(0)::float8 AS lateness_seconds_sum, (0)::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 1::bigint AS model_calls, ((r.outcome <> 'ok')::int)::bigint AS failed_model_calls FROM new_rows r) d
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

CREATE TRIGGER sync_run_hours_activity_insert AFTER INSERT ON sync_run_hours
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_hour_totals_sync_run_hours();
CREATE TRIGGER sync_run_hours_activity_update AFTER UPDATE ON sync_run_hours
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_hour_totals_sync_run_hours();
CREATE TRIGGER sync_runs_activity_insert AFTER INSERT ON sync_runs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_hour_totals_sync_runs();
CREATE TRIGGER sync_runs_activity_update AFTER UPDATE ON sync_runs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_hour_totals_sync_runs();
CREATE TRIGGER changes_activity_insert AFTER INSERT ON changes
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_hour_totals_changes();
CREATE TRIGGER evaluations_activity_insert AFTER INSERT ON evaluations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_hour_totals_evaluations();
CREATE TRIGGER evaluations_activity_update AFTER UPDATE ON evaluations
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_hour_totals_evaluations();
CREATE TRIGGER notifications_activity_insert AFTER INSERT ON notifications
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_hour_totals_notifications();
CREATE TRIGGER model_calls_activity_insert AFTER INSERT ON model_calls
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_hour_totals_model_calls();

-- The last two days as they were before the triggers (the migration
-- holds the tables' locks from CREATE TRIGGER on: nothing is counted twice
-- or missed).
INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, 0, sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT r.hour AS hour, +(r.runs)::bigint AS runs, 0::bigint AS failed_runs, +(r.runs)::bigint AS timed_runs, +(r.lateness_seconds_sum)::float8 AS lateness_seconds_sum, (r.lateness_seconds_max)::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM (SELECT * FROM sync_run_hours WHERE hour >= date_trunc('hour', now(), 'UTC') - interval '47 hours') r) d
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

INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, 0, sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.started_at, 'UTC') AS hour, 1::bigint AS runs, ((r.status IN ('failed', 'deferred', 'abandoned'))::int)::bigint AS failed_runs, ((r.due_at IS NOT NULL)::int)::bigint AS timed_runs, (coalesce(greatest(extract(epoch FROM r.started_at - r.due_at), 0), 0))::float8 AS lateness_seconds_sum, (coalesce(greatest(extract(epoch FROM r.started_at - r.due_at), 0), 0))::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM (SELECT * FROM sync_runs WHERE started_at >= date_trunc('hour', now(), 'UTC') - interval '47 hours') r) d
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

INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, 0, sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.created_at, 'UTC') AS hour, 0::bigint AS runs, 0::bigint AS failed_runs, 0::bigint AS timed_runs, +(0)::float8 AS lateness_seconds_sum, (0)::float8 AS lateness_seconds_max, 1::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM (SELECT * FROM changes WHERE created_at >= date_trunc('hour', now(), 'UTC') - interval '47 hours') r) d
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

INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, 0, sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.created_at, 'UTC') AS hour, 0::bigint AS runs, 0::bigint AS failed_runs, 0::bigint AS timed_runs, +(0)::float8 AS lateness_seconds_sum, (0)::float8 AS lateness_seconds_max, 0::bigint AS changes, 1::bigint AS evaluations, ((r.decision = 'notify')::int)::bigint AS notify_decisions, 0::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM (SELECT * FROM evaluations WHERE created_at >= date_trunc('hour', now(), 'UTC') - interval '47 hours') r) d
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

INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, 0, sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.created_at, 'UTC') AS hour, 0::bigint AS runs, 0::bigint AS failed_runs, 0::bigint AS timed_runs, +(0)::float8 AS lateness_seconds_sum, (0)::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 1::bigint AS notifications, 0::bigint AS model_calls, 0::bigint AS failed_model_calls FROM (SELECT * FROM notifications WHERE created_at >= date_trunc('hour', now(), 'UTC') - interval '47 hours') r) d
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

INSERT INTO activity_hour_totals AS t (hour, backend, runs, failed_runs, timed_runs, lateness_seconds_sum, lateness_seconds_max, changes, evaluations, notify_decisions, notifications, model_calls, failed_model_calls)
        SELECT d.hour, 0, sum(d.runs)::bigint, sum(d.failed_runs)::bigint, sum(d.timed_runs)::bigint, sum(d.lateness_seconds_sum), max(d.lateness_seconds_max), sum(d.changes)::bigint, sum(d.evaluations)::bigint, sum(d.notify_decisions)::bigint, sum(d.notifications)::bigint, sum(d.model_calls)::bigint, sum(d.failed_model_calls)::bigint
        FROM (SELECT date_trunc('hour', r.created_at, 'UTC') AS hour, 0::bigint AS runs, 0::bigint AS failed_runs, 0::bigint AS timed_runs, +(0)::float8 AS lateness_seconds_sum, (0)::float8 AS lateness_seconds_max, 0::bigint AS changes, 0::bigint AS evaluations, 0::bigint AS notify_decisions, 0::bigint AS notifications, 1::bigint AS model_calls, ((r.outcome <> 'ok')::int)::bigint AS failed_model_calls FROM (SELECT * FROM model_calls WHERE created_at >= date_trunc('hour', now(), 'UTC') - interval '47 hours') r) d
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

-- report_stuck's expired source leases and report_high_retry's failing
-- sources, without a scan of every source.
CREATE INDEX sources_lease_expires_idx ON sources (lease_expires_at) WHERE lease_owner IS NOT NULL;
CREATE INDEX sources_failing_idx ON sources (failure_count) WHERE failure_count > 0;

-- The models page without reading evaluations' heap: the decision a model
-- call led to (report_expensive_evaluations joins it), and the model-judged
-- decisions of recent days (report_model_drift_recent), from their indexes.
CREATE INDEX evaluations_model_call_decision_idx ON evaluations (model_call_id)
    INCLUDE (change_id, step, decision, reason) WHERE model_call_id IS NOT NULL;
DROP INDEX evaluations_judged_created_idx;
CREATE INDEX evaluations_judged_created_idx ON evaluations (created_at)
    INCLUDE (source, watch, model_call_id, step, decision, confidence, owner) WHERE step IN ('model', 'cache');

CREATE OR REPLACE VIEW report_activity_hourly AS
WITH hours AS (
    SELECT generate_series(date_trunc('hour', now(), 'UTC') - interval '23 hours', date_trunc('hour', now(), 'UTC'),
                           interval '1 hour') AS hour
),
t AS (
    SELECT t.hour, sum(t.runs)::bigint AS runs, sum(t.failed_runs)::bigint AS failed_runs, sum(t.timed_runs) AS timed_runs,
           sum(t.lateness_seconds_sum) AS late_sum, max(t.lateness_seconds_max) AS late_max,
           sum(t.changes)::bigint AS changes, sum(t.evaluations)::bigint AS evaluations,
           sum(t.notify_decisions)::bigint AS notify_decisions, sum(t.notifications)::bigint AS notifications,
           sum(t.model_calls)::bigint AS model_calls, sum(t.failed_model_calls)::bigint AS failed_model_calls
    FROM activity_hour_totals t
    WHERE t.hour >= date_trunc('hour', now(), 'UTC') - interval '23 hours'
    GROUP BY t.hour
)
SELECT h.hour,
       coalesce(t.runs, 0)               AS runs,
       coalesce(t.failed_runs, 0)        AS failed_runs,
       coalesce(t.changes, 0)            AS changes,
       coalesce(t.evaluations, 0)        AS evaluations,
       coalesce(t.notify_decisions, 0)   AS notify_decisions,
       coalesce(t.notifications, 0)      AS notifications,
       coalesce(t.model_calls, 0)        AS model_calls,
       coalesce(t.failed_model_calls, 0) AS failed_model_calls,
       round((t.late_sum / nullif(t.timed_runs, 0))::numeric, 3) AS avg_lateness_seconds,
       round(t.late_max::numeric, 3)     AS max_lateness_seconds
FROM hours h
LEFT JOIN t ON t.hour = h.hour
ORDER BY h.hour;

CREATE OR REPLACE VIEW report_sources AS
SELECT s.name,
       s.connector,
       s.status,
       CASE WHEN s.lease_owner IS NOT NULL AND s.lease_expires_at >= now() THEN 'running'
            WHEN s.status <> 'active' THEN s.status
            WHEN s.lease_owner IS NOT NULL THEN 'lease expired'
            WHEN s.run_requested_at IS NOT NULL THEN 'requested'
            WHEN s.next_run_at <= now() THEN 'due'
            ELSE 'scheduled' END                            AS state,
       s.status_reason,
       s.schedule,
       s.interval_reason,
       s.next_run_at,
       CASE WHEN s.status = 'active' AND s.next_run_at < now()
                 AND (s.lease_owner IS NULL OR s.lease_expires_at < now())
            THEN round(extract(epoch FROM now() - s.next_run_at)::numeric, 3) ELSE 0 END AS lateness_seconds,
       s.last_run_at,
       s.last_success_at,
       s.last_change_at,
       s.failure_count,
       s.last_error,
       s.lease_owner,
       s.lease_expires_at,
       s.run_id,
       s.run_requested_at,
       coalesce(d.owner, '')                                AS owner,
       d.managed_by,
       coalesce(d.paused, false)                            AS definition_paused
FROM sources s
LEFT JOIN source_definitions d ON d.name = s.name;

CREATE OR REPLACE VIEW report_model_drift_recent AS
SELECT date_trunc('day', e.created_at, 'UTC')            AS day,
       e.source,
       e.watch,
       mc.model,
       mc.model_digest,
       mc.prompt_version,
       count(*)                                          AS evaluations,
       count(*) FILTER (WHERE e.step = 'model')          AS judged,
       count(*) FILTER (WHERE e.step = 'cache')          AS cache_hits,
       count(*) FILTER (WHERE e.decision IN ('notify', 'duplicate')) AS notify,
       count(*) FILTER (WHERE e.decision = 'skip')       AS skip,
       round((count(*) FILTER (WHERE e.decision IN ('notify', 'duplicate')))::numeric / count(*), 3) AS notify_rate,
       round(avg(e.confidence)::numeric, 3)              AS avg_confidence,
       e.owner
FROM evaluations e
JOIN model_calls mc ON mc.id = e.model_call_id
WHERE e.step IN ('model', 'cache') AND e.created_at >= date_trunc('day', now(), 'UTC') - interval '13 days'
GROUP BY 1, 2, 3, 4, 5, 6, e.owner
ORDER BY 1, 2, 3, 5, 6, e.owner;
