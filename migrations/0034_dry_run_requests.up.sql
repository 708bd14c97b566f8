-- dry_run_requests: dry runs with the model asked through the api
-- (dry_run with use_model), answered by the evaluator deployment. The api
-- records a request and NOTIFYs <schema>.dryrun; an evaluator claims it
-- (FOR UPDATE SKIP LOCKED), replays the watch with the model and writes
-- the report, NOTIFYing <schema>.dryrun_done; the api, waiting, reads the
-- report and deletes the row. A request no evaluator took before the api
-- stopped waiting is deleted by the api; what is left is deleted an hour
-- past expires_at. Owner: internal/replay.
CREATE TABLE dry_run_requests (
    id          bigserial   PRIMARY KEY,
    -- the user who asked.
    owner       text        NOT NULL,
    source      text        NOT NULL,
    watch       text        NOT NULL,
    -- the source's definition holding the one watch to test.
    definition  jsonb       NOT NULL,
    since       timestamptz NOT NULL,
    until       timestamptz NOT NULL,
    max_calls   integer     NOT NULL CHECK (max_calls > 0),
    status      text        NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'running', 'done', 'failed')),
    claimed_by  text,
    claimed_at  timestamptz,
    -- the replay's report (done) or why there is none (failed).
    report      jsonb,
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- an evaluator claims the request only before this time.
    expires_at  timestamptz NOT NULL,
    finished_at timestamptz
);

CREATE INDEX dry_run_requests_pending_idx ON dry_run_requests (id) WHERE status = 'pending';
CREATE INDEX dry_run_requests_expires_idx ON dry_run_requests (expires_at);
