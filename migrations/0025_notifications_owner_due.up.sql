-- The fair claim of the lane of watches' own webhooks (outbox.ClaimFair):
-- it walks the owners that have pending rows in a sink (one index descent
-- per owner, a loose index scan) and reads the first due rows of each, in
-- due order, stopping at the per-owner cap. Every column is already in an
-- index (notifications_due_idx, notifications_owner_idx), so a claim or
-- an outcome changes no column only this index reads: the updates that
-- were HOT stay HOT.
CREATE INDEX notifications_owner_due_idx ON notifications (sink, owner, next_attempt_at, id) WHERE status = 'pending';
