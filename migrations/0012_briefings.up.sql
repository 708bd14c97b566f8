-- lookout schema, version 12: briefings written by the model for digests
-- (docs/delivery.md#briefings, docs/semantic.md#briefings).

-- model_calls: a request may now be for a briefing; it has no change and
-- no record (record_id is ''), and input_ref names the digest.
ALTER TABLE model_calls DROP CONSTRAINT model_calls_purpose_check;
ALTER TABLE model_calls ADD CONSTRAINT model_calls_purpose_check
    CHECK (purpose IN ('evaluate', 'replay', 'briefing'));

-- briefings: the briefing cache, owned by internal/semantic. A (prompt
-- version, model digest, input hash) — the question, the model and the
-- digest's items as the model is shown them — is written once: a retry of
-- the digest, another sink of the same matches or another evaluator
-- replica finds the row instead of asking the model again. A replica
-- claims the row ('writing', owner, lease) before it asks, so two
-- replicas never ask for the same briefing at once; an expired claim (a
-- replica that died while the model wrote) is taken over. 'failed' keeps
-- why the model could not write it, so the digest goes out without a
-- summary, saying why, and the same digest is not asked again.
CREATE TABLE briefings (
    prompt_version   text        NOT NULL,
    model_digest     text        NOT NULL,
    input_hash       text        NOT NULL,
    source           text        NOT NULL,
    watch            text        NOT NULL,
    model            text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('writing', 'ok', 'failed')),
    owner            text,
    lease_expires_at timestamptz,
    -- the validated answer: {"headline": ..., "items": [{"record_id", "why_it_matters"}]}
    briefing         jsonb,
    -- why there is no briefing (state failed)
    error            text,
    -- items shown to the model
    items            integer     NOT NULL DEFAULT 0,
    model_call_id    bigint      REFERENCES model_calls (id) ON DELETE SET NULL,
    hits             integer     NOT NULL DEFAULT 0,
    last_hit_at      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (prompt_version, model_digest, input_hash)
);
