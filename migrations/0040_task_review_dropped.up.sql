-- A pending review whose task watch lost its review: block (the source
-- edited while the result waited) is dropped by the task runner: status
-- 'dropped', why in last_error, and the task completes as if unreviewed
-- (docs/tasks.md#review). Widens the CHECK; no binary before writes it.
ALTER TABLE task_reviews DROP CONSTRAINT task_reviews_status_check;
ALTER TABLE task_reviews ADD CONSTRAINT task_reviews_status_check
    CHECK (status IN ('pending', 'passed', 'failed', 'dropped'));
