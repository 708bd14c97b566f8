-- lookout schema, version 34: drift of model outputs (docs/semantic.md,
-- "Drift of model outputs"). Owned by internal/drift.

-- drift_embeddings: one row per model answer with a reason (a watch's
-- verdict, a task review's score), copied from model_calls by the
-- evaluator's drift service, then embedded through Ollama's /api/embed.
-- A claimable queue: a pending row is claimed in batches (claimed_until is
-- the lease), embedded, and marked embedded; a model that is down leaves
-- it pending with next_at pushed back. Rows are never dropped for a
-- failure. The reason is copied so that pruning model_calls loses nothing.
CREATE TABLE drift_embeddings (
    model_call_id   bigint      PRIMARY KEY,
    -- model_calls.created_at: the decision's time, which places it in a week.
    call_created_at timestamptz NOT NULL,
    source          text        NOT NULL,
    watch           text        NOT NULL,
    owner           text        NOT NULL DEFAULT '',
    -- the model and digest that wrote the reason.
    model           text        NOT NULL,
    model_digest    text        NOT NULL DEFAULT '',
    reason          text        NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'embedded')),
    -- the embedding model, its digest and the vector, once embedded.
    embed_model     text        NOT NULL DEFAULT '',
    embed_digest    text        NOT NULL DEFAULT '',
    embedding       real[],
    attempts        integer     NOT NULL DEFAULT 0,
    next_at         timestamptz NOT NULL DEFAULT now(),
    claimed_by      text,
    claimed_until   timestamptz,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    embedded_at     timestamptz,
    CHECK ((state = 'embedded') = (embedding IS NOT NULL))
);

CREATE INDEX drift_embeddings_pending_idx ON drift_embeddings (next_at) WHERE state = 'pending';
CREATE INDEX drift_embeddings_watch_idx ON drift_embeddings (source, watch, call_created_at) WHERE state = 'embedded';
CREATE INDEX drift_embeddings_call_created_idx ON drift_embeddings (call_created_at);

-- model_versions: a row each time the digest Ollama reports for a model
-- name differs from the last one recorded (the first row of a model is
-- when it was first seen). seen_at is the first call with that digest.
CREATE TABLE model_versions (
    id      bigserial   PRIMARY KEY,
    model   text        NOT NULL,
    digest  text        NOT NULL,
    seen_at timestamptz NOT NULL
);

CREATE INDEX model_versions_model_idx ON model_versions (model, seen_at, id);

COMMENT ON TABLE drift_embeddings IS 'embeddings of model decisions'' reasons, per watch and week (the drift report); a claimable queue until embedded';
COMMENT ON TABLE model_versions IS 'a row each time a model name''s digest changes';
