-- Delivery: digests, dead letters, per-sink claims and the delivery reports.
-- See docs/delivery.md for the lifecycle of a notifications row.

-- 'held': a match of a digest watch, waiting for its period to end
-- (digest_due_at); the digester then folds it into one summary row and
-- marks it 'digested' (digest_id = the summary).
ALTER TABLE notifications DROP CONSTRAINT notifications_status_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_status_check
    CHECK (status IN ('pending', 'delivered', 'dead', 'digested', 'held'));

ALTER TABLE notifications
    -- single: one match; digest: the summary of a digest period.
    ADD COLUMN kind              text        NOT NULL DEFAULT 'single'
                                 CHECK (kind IN ('single', 'digest')),
    -- held rows: when the digest period ends; digest rows: the period end.
    ADD COLUMN digest_due_at     timestamptz,
    -- digested rows: the summary that carried them.
    ADD COLUMN digest_id         bigint      REFERENCES notifications (id) ON DELETE SET NULL,
    -- digest rows: how many matches the summary lists.
    ADD COLUMN digest_count      integer,
    -- when the last delivery attempt ended, and when the row became dead.
    ADD COLUMN last_attempt_at   timestamptz,
    ADD COLUMN dead_at           timestamptz,
    -- the last time a duplicate was suppressed against this row.
    ADD COLUMN last_duplicate_at timestamptz,
    -- how often an operator sent the row back from dead (retry-dead).
    ADD COLUMN manual_retries    integer     NOT NULL DEFAULT 0;

-- Each sink's deliverer claims only its own rows: a slow sink never holds
-- up another's queue.
DROP INDEX notifications_due_idx;
CREATE INDEX notifications_due_idx ON notifications (sink, next_attempt_at) WHERE status = 'pending';
CREATE INDEX notifications_held_idx ON notifications (digest_due_at) WHERE status = 'held';
CREATE INDEX notifications_dead_idx ON notifications (dead_at) WHERE status = 'dead';
CREATE INDEX notifications_digest_idx ON notifications (digest_id) WHERE digest_id IS NOT NULL;

-- Dead letters: notifications that exhausted their attempts or failed
-- permanently. `evaluator retry-dead` sends them back to pending.
CREATE VIEW report_dead_letters AS
SELECT id, sink, source, watch, record_id, dedupe_key, kind, title, attempts, last_error,
       created_at, last_attempt_at, dead_at, manual_retries
FROM notifications
WHERE status = 'dead'
ORDER BY dead_at DESC NULLS LAST, id DESC;

-- Duplicates suppressed, per watch and sink: how often a decision found its
-- dedupe key (or a recent notification, for window policies) already there.
CREATE VIEW report_duplicates_suppressed AS
SELECT source, watch, sink,
       count(*)                                   AS notifications,
       sum(duplicates_suppressed)::bigint         AS duplicates_suppressed,
       count(*) FILTER (WHERE duplicates_suppressed > 0) AS notifications_with_duplicates,
       max(last_duplicate_at)                     AS last_duplicate_at
FROM notifications
WHERE kind = 'single'
GROUP BY source, watch, sink
ORDER BY sum(duplicates_suppressed) DESC, source, watch, sink;

-- The outbox at a glance, per sink.
CREATE VIEW report_delivery_status AS
SELECT sink,
       count(*) FILTER (WHERE status = 'pending')   AS pending,
       count(*) FILTER (WHERE status = 'pending' AND attempts > 0) AS retrying,
       count(*) FILTER (WHERE status = 'held')      AS held_for_digest,
       count(*) FILTER (WHERE status = 'delivered') AS delivered,
       count(*) FILTER (WHERE status = 'digested')  AS digested,
       count(*) FILTER (WHERE status = 'dead')      AS dead,
       min(created_at) FILTER (WHERE status = 'pending') AS oldest_pending_at,
       max(delivered_at)                            AS last_delivered_at,
       round(avg(attempts) FILTER (WHERE status = 'delivered'), 2) AS avg_attempts_delivered
FROM notifications
GROUP BY sink
ORDER BY sink;
