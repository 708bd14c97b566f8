UPDATE task_reviews SET status = 'passed' WHERE status = 'dropped';
ALTER TABLE task_reviews DROP CONSTRAINT task_reviews_status_check;
ALTER TABLE task_reviews ADD CONSTRAINT task_reviews_status_check
    CHECK (status IN ('pending', 'passed', 'failed'));
