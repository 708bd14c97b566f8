-- lookout schema, version 27: the changes' hourly activity is counted by
-- their writer, not by a statement trigger.
--
-- changes_activity_insert (migration 18) summed each statement's rows into
-- activity_hour_totals through a transition table. A transition table on a
-- partitioned table makes COPY insert row by row instead of in batches
-- (PostgreSQL's CopyFrom falls back to single inserts), and the rows are
-- kept a second time for the trigger: 0.1 s of the 0.34 s a COPY of
-- 100,000 created changes costs without indexes. internal/changes, the one
-- writer of changes, now adds each statement's count to the same row in
-- the same transaction: the hour of now() (a change's created_at is its
-- transaction's now()) and pg_backend_pid(), as the trigger did.
DROP TRIGGER changes_activity_insert ON changes;
DROP FUNCTION activity_hour_totals_changes();
