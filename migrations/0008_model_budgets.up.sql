-- lookout schema, version 8: model budgets are caps shared by every
-- evaluator. See docs/semantic.md#budgets.

-- model_budgets: the model calls and tokens a budgeted watch spent on one
-- UTC day. An evaluator reserves a call here with one atomic UPDATE before
-- it asks the model (calls < calls_per_day), and gives the reservation back
-- when the call was not made; tokens are added after each call. So
-- calls_per_day holds across replicas and workers.
CREATE TABLE model_budgets (
    source      text        NOT NULL,
    watch       text        NOT NULL,
    day         date        NOT NULL,
    calls       integer     NOT NULL DEFAULT 0 CHECK (calls >= 0),
    tokens      bigint      NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, watch, day)
);

-- Today's use so far, from the calls on record (the budgets counted
-- model_calls before this table).
INSERT INTO model_budgets (source, watch, day, calls, tokens)
SELECT source, watch, (now() AT TIME ZONE 'UTC')::date, count(*), coalesce(sum(prompt_tokens + output_tokens), 0)
FROM model_calls
WHERE purpose = 'evaluate' AND created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
GROUP BY source, watch;
