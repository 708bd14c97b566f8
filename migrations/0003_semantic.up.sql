-- lookout schema, version 3: the semantic check (model calls, verdict cache,
-- drift and cost reports). See docs/semantic.md.

-- model_calls: one row per request to the model server (a malformed answer
-- retried is two rows, attempt 1 and 2). Written right after the call,
-- outside the evaluation's transaction, so a call is on record even when
-- the evaluator dies before committing its decision. evaluations.model_call_id
-- points here.
CREATE TABLE model_calls (
    id              bigserial PRIMARY KEY,
    -- evaluate (the evaluator) or replay (the replay command; not counted
    -- against watch budgets).
    purpose         text        NOT NULL DEFAULT 'evaluate'
                    CHECK (purpose IN ('evaluate', 'replay')),
    change_id       bigint      REFERENCES changes (id) ON DELETE SET NULL,
    source          text        NOT NULL,
    record_id       text        NOT NULL,
    watch           text        NOT NULL,
    -- the record's content hash (changes.new_hash) at the change.
    content_hash    text,
    model           text        NOT NULL,
    -- the model's digest as /api/tags reported it; '' when it could not be read.
    model_digest    text        NOT NULL DEFAULT '',
    -- hash of the prompt template, the watch's ask, examples, counter-examples
    -- and the model options: a new value means the question changed.
    prompt_version  text        NOT NULL,
    -- what the model was shown: input_ref names the change, input_hash is the
    -- hash of the rendered change (record, kind, changed fields, previous values).
    input_ref       text        NOT NULL,
    input_hash      text        NOT NULL,
    -- request summary: options, stream, format, message sizes (not the text).
    request         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- the answer when it is JSON; raw_output keeps (the start of) an answer that is not.
    output          jsonb,
    raw_output      text,
    should_notify   boolean,
    urgency         text,
    confidence      double precision,
    reason          text,
    prompt_tokens   integer     NOT NULL DEFAULT 0,
    output_tokens   integer     NOT NULL DEFAULT 0,
    latency_ms      double precision NOT NULL DEFAULT 0,
    outcome         text        NOT NULL
                    CHECK (outcome IN ('ok', 'malformed', 'error', 'timeout')),
    error           text,
    attempt         integer     NOT NULL DEFAULT 1,
    evaluator       text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Budgets count a watch's calls of the current UTC day.
CREATE INDEX model_calls_watch_created_idx ON model_calls (source, watch, created_at);
CREATE INDEX model_calls_created_idx ON model_calls (created_at);
CREATE INDEX model_calls_change_idx ON model_calls (change_id);

-- verdicts: the verdict cache. A (prompt version, model digest, input hash)
-- is judged once: an unchanged record asked the same question of the same
-- model is never sent again; a new prompt version or model digest misses.
-- The watch is not part of the key: the prompt version already covers the
-- ask, examples and options, so two watches asking the same question share
-- verdicts.
CREATE TABLE verdicts (
    prompt_version  text        NOT NULL,
    model_digest    text        NOT NULL,
    input_hash      text        NOT NULL,
    content_hash    text,
    model           text        NOT NULL,
    source          text        NOT NULL,
    watch           text        NOT NULL,
    should_notify   boolean     NOT NULL,
    urgency         text        NOT NULL CHECK (urgency IN ('low', 'medium', 'high')),
    confidence      double precision NOT NULL,
    reason          text        NOT NULL,
    model_call_id   bigint      REFERENCES model_calls (id) ON DELETE SET NULL,
    hits            integer     NOT NULL DEFAULT 0,
    last_hit_at     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (prompt_version, model_digest, input_hash)
);

CREATE INDEX evaluations_model_call_idx ON evaluations (model_call_id) WHERE model_call_id IS NOT NULL;

-- report_model_drift: decisions of model-judged evaluations per day, watch,
-- model digest and prompt version. A new digest or prompt version shows up
-- as a new row; a shift in notify_rate or avg_confidence between rows of one
-- watch is drift to look at.
CREATE VIEW report_model_drift AS
SELECT date_trunc('day', e.created_at) AS day,
       e.source,
       e.watch,
       mc.model,
       mc.model_digest,
       mc.prompt_version,
       count(*)                                          AS evaluations,
       count(*) FILTER (WHERE e.step = 'model')          AS judged,
       count(*) FILTER (WHERE e.step = 'cache')          AS cache_hits,
       count(*) FILTER (WHERE e.decision IN ('notify', 'duplicate')) AS notify,
       count(*) FILTER (WHERE e.decision = 'skip')       AS skip,
       round((count(*) FILTER (WHERE e.decision IN ('notify', 'duplicate')))::numeric / count(*), 3) AS notify_rate,
       round(avg(e.confidence)::numeric, 3)              AS avg_confidence,
       count(*) FILTER (WHERE e.urgency = 'high')        AS urgency_high,
       min(e.created_at)                                 AS first_seen,
       max(e.created_at)                                 AS last_seen
FROM evaluations e
JOIN model_calls mc ON mc.id = e.model_call_id
WHERE e.step IN ('model', 'cache')
GROUP BY 1, 2, 3, 4, 5, 6;

-- report_expensive_evaluations: model calls, most expensive first (by
-- latency, then tokens), with the decision they led to.
CREATE VIEW report_expensive_evaluations AS
SELECT mc.id AS model_call_id,
       mc.created_at,
       mc.purpose,
       mc.source,
       mc.watch,
       mc.record_id,
       mc.change_id,
       mc.model,
       mc.model_digest,
       mc.prompt_version,
       mc.outcome,
       mc.attempt,
       mc.latency_ms,
       mc.prompt_tokens,
       mc.output_tokens,
       mc.prompt_tokens + mc.output_tokens AS total_tokens,
       e.decision,
       e.reason
FROM model_calls mc
LEFT JOIN evaluations e ON e.model_call_id = mc.id AND e.change_id = mc.change_id AND e.step = 'model'
ORDER BY mc.latency_ms DESC, mc.prompt_tokens + mc.output_tokens DESC;

-- report_model_usage: model use per UTC day and watch: what budgets count.
CREATE VIEW report_model_usage AS
SELECT date_trunc('day', mc.created_at AT TIME ZONE 'UTC') AS day_utc,
       mc.source,
       mc.watch,
       mc.purpose,
       count(*)                                             AS calls,
       count(*) FILTER (WHERE mc.outcome = 'ok')            AS ok,
       count(*) FILTER (WHERE mc.outcome = 'malformed')     AS malformed,
       count(*) FILTER (WHERE mc.outcome IN ('error', 'timeout')) AS failed,
       sum(mc.prompt_tokens)                                AS prompt_tokens,
       sum(mc.output_tokens)                                AS output_tokens,
       round(avg(mc.latency_ms)::numeric, 1)                AS avg_latency_ms,
       max(mc.latency_ms)                                   AS max_latency_ms
FROM model_calls mc
GROUP BY 1, 2, 3, 4;
