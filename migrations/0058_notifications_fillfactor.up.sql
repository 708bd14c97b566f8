-- lookout schema, version 58: a claim of notifications (docs/delivery.md)
-- sets the lease and counts the attempt, columns no index holds; an
-- outcome then moves the row out of pending. Rows enqueued together fill
-- their pages and are claimed together, so with pages packed full every
-- claim wrote a new version of each row elsewhere and an entry for it in
-- each of the table's 13 indexes. Leave more than half of each page free,
-- room for a new version of every row on it, a little longer than the
-- old (the lease's owner and expiry were NULL): the claim's update stays
-- on the page (HOT: no index written, the old version pruned at the next
-- access), and the outcome's new version lands on the page the claim
-- left. At 50 a few rows a page still moved (8 of 150 in
-- TestClaimUpdatesAreHOT); 45 is sync_run_hours' (migration 24).
--
-- A partitioned table holds no storage parameters: each partition gets
-- them, the default partition included, whose parameters internal/retention
-- gives every partition it makes. Pages already full keep their rows;
-- pages filled from now on keep the room.
DO $$
DECLARE
    p regclass;
BEGIN
    FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'notifications'::regclass LOOP
        EXECUTE format('ALTER TABLE %s SET (fillfactor = 45)', p);
    END LOOP;
END $$;
