-- The deliverer's claim (outbox.Claim) takes a sink's due rows in
-- (next_attempt_at, id) order. With the index on (sink, next_attempt_at)
-- alone, rows enqueued together (one transaction: one now()) tie, and
-- every claim read and sorted all of the sink's pending rows to take its
-- batch: draining n rows read n²/(2 × batch) of them (20,000 rows: two
-- million). With id in the index a claim reads its batch and stops.
DROP INDEX notifications_due_idx;
CREATE INDEX notifications_due_idx ON notifications (sink, next_attempt_at, id) WHERE status = 'pending';
