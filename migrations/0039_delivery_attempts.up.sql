-- lookout schema, version 39: delivery_attempts, one row per delivery
-- attempt of a notification (docs/schema.md), written by the deliverer in
-- the statement that records the attempt's outcome on its notification
-- (outbox.Record); and an index for pruning used sign-in links.
-- Owned by internal/outbox.
--
-- source is the notification's: on Citus the table is distributed by it,
-- co-located with notifications (db.CitusLayout). notification_id and
-- notification_created_at are the notification's key (a plain id, as
-- between the partitioned tables: the attempts outlive nothing, but
-- retention prunes each table by its own window). Pruned by rows past
-- retention.delivery_attempts (outbox.PruneAttempts).
CREATE TABLE delivery_attempts (
    id                      bigserial        PRIMARY KEY,
    source                  text             NOT NULL,
    notification_id         bigint           NOT NULL,
    notification_created_at timestamptz      NOT NULL,
    sink                    text             NOT NULL,
    -- notifications.attempts when it was made: 1 for the first.
    attempt                 integer          NOT NULL,
    started_at              timestamptz      NOT NULL,
    duration_ms             double precision NOT NULL,
    -- delivered; retry (failed, due again); dead (failed for good, or out of
    -- attempts); refused (the egress policy refused the connection).
    outcome                 text             NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead', 'refused')),
    -- the receiver's HTTP status (NULL: no HTTP answer), the error (secrets
    -- redacted) and the first 512 bytes of its answer's body.
    http_status             integer,
    error                   text,
    response                text,
    recorded_at             timestamptz      NOT NULL DEFAULT now()
);

CREATE INDEX delivery_attempts_notification_idx ON delivery_attempts (notification_id, attempt);
CREATE INDEX delivery_attempts_started_idx ON delivery_attempts (started_at);

-- sign_in_links: used links past retention.sign_in_links are pruned by
-- their use (tokens.PruneLinks), expired ones by expires_at.
CREATE INDEX sign_in_links_used_idx ON sign_in_links (used_at) WHERE used_at IS NOT NULL;
