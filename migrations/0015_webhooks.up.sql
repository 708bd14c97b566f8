-- lookout schema, version 15: webhook ingest with polling as
-- reconciliation (docs/webhooks.md). Owned by package inbound
-- (inbound_events); the syncer writes sync_runs.repaired and the webhook
-- columns of sources.

-- inbound_events: every delivery POSTed to /ingest/{source}, stored before
-- it is acknowledged. A delivery whose signature does not verify is kept
-- as rejected, without its payload.
CREATE TABLE inbound_events (
    id               bigserial   PRIMARY KEY,
    source           text        NOT NULL,
    -- the provider's delivery id (X-GitHub-Delivery, webhook-id), or
    -- 'sha256:<payload_hash>' when the provider sends none.
    delivery_id      text        NOT NULL,
    -- the provider's event type (issues, pull_request, ping; a Standard
    -- Webhooks payload's type), and its action when it has one.
    event_type       text        NOT NULL DEFAULT '',
    action           text,
    -- the object the event is about, as the record id the source writes
    -- (the issue number of a GitHub event); NULL when unknown.
    object_id        text,
    received_at      timestamptz NOT NULL DEFAULT now(),
    signature_valid  boolean     NOT NULL,
    -- the body as received, only when the signature verified.
    payload          jsonb,
    -- sha256 (hex) of the raw body.
    payload_hash     text        NOT NULL,
    -- when the syncer (or the ingest, for rejected and ignored events)
    -- finished with it, and how.
    processed_at     timestamptz,
    outcome          text        CHECK (outcome IN ('created', 'updated', 'unchanged', 'deleted', 'stale',
                                                    'ignored', 'rejected', 'failed')),
    -- why: the reason an event was ignored, stale or failed.
    detail           text,
    -- the syncer's claim while it maps the event (lease), and its tries.
    attempts         integer     NOT NULL DEFAULT 0,
    claimed_by       text,
    claim_expires_at timestamptz,
    CHECK (signature_valid OR payload IS NULL),
    CHECK ((processed_at IS NULL) = (outcome IS NULL))
);
-- One stored event per delivery id and source; rejected deliveries do not
-- take the id (the provider's redelivery after a secret fix is stored).
CREATE UNIQUE INDEX inbound_events_delivery_idx ON inbound_events (source, delivery_id) WHERE signature_valid;
CREATE UNIQUE INDEX inbound_events_rejected_idx ON inbound_events (source, delivery_id) WHERE NOT signature_valid;
-- The syncer's claim: unprocessed events, oldest first.
CREATE INDEX inbound_events_pending_idx ON inbound_events (id) WHERE processed_at IS NULL;
CREATE INDEX inbound_events_source_received_idx ON inbound_events (source, received_at DESC);

-- Changes a reconciliation poll of a webhook source wrote: what no event
-- brought (a missed or rejected delivery).
ALTER TABLE sync_runs ADD COLUMN repaired integer NOT NULL DEFAULT 0;

-- The webhook provider of a source (github, standard, hmac), NULL when it
-- has no webhook, and how long it may go without an event while its polls
-- find changes before the watchdog alerts.
ALTER TABLE sources ADD COLUMN webhook text,
                    ADD COLUMN silence_alert_seconds integer;

CREATE VIEW report_webhook_health AS
SELECT s.name                                         AS source,
       s.webhook                                      AS provider,
       coalesce(e.received, 0)                        AS received_24h,
       coalesce(e.rejected, 0)                        AS rejected_24h,
       coalesce(e.ignored, 0)                         AS ignored_24h,
       coalesce(e.failed, 0)                          AS failed_24h,
       coalesce(p.pending, 0)                         AS pending,
       l.last_event_at,
       coalesce(r.repaired, 0)                        AS repaired_24h,
       r.last_repair_at,
       now() - coalesce(l.last_event_at, s.created_at) AS silence,
       s.silence_alert_seconds,
       coalesce(now() - coalesce(l.last_event_at, s.created_at) > make_interval(secs => s.silence_alert_seconds), false)
                                                      AS silent
FROM sources s
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE signature_valid)       AS received,
           count(*) FILTER (WHERE NOT signature_valid)   AS rejected,
           count(*) FILTER (WHERE outcome = 'ignored')   AS ignored,
           count(*) FILTER (WHERE outcome = 'failed')    AS failed
    FROM inbound_events
    WHERE source = s.name AND received_at > now() - interval '24 hours'
) e ON true
LEFT JOIN LATERAL (
    SELECT max(received_at) AS last_event_at
    FROM inbound_events WHERE source = s.name AND signature_valid
) l ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS pending FROM inbound_events WHERE source = s.name AND processed_at IS NULL
) p ON true
LEFT JOIN LATERAL (
    SELECT sum(repaired)::bigint AS repaired, max(started_at) FILTER (WHERE repaired > 0) AS last_repair_at
    FROM sync_runs WHERE source = s.name AND started_at > now() - interval '24 hours'
) r ON true
WHERE s.webhook IS NOT NULL
ORDER BY s.name;
COMMENT ON VIEW report_webhook_health IS
    'webhook sources: events received, rejected, ignored and failed in the last 24 hours, pending events, the last event, changes the reconciliation poll repaired, and how long the source has been silent';
