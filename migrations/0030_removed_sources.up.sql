-- A source whose definition is deleted is marked 'removed' (by the
-- deletion, in its transaction): no syncer claims it, the overview does
-- not count it as due, report_sources shows its state as removed. Defined
-- again, the syncer registers it active. A wider CHECK: the previous
-- release writes none of the new value.
ALTER TABLE sources DROP CONSTRAINT sources_status_check;
ALTER TABLE sources ADD CONSTRAINT sources_status_check
    CHECK (status IN ('active', 'paused', 'disabled', 'completed', 'removed')) NOT VALID;
ALTER TABLE sources VALIDATE CONSTRAINT sources_status_check;
