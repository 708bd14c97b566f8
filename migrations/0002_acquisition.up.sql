-- lookout schema, version 2: acquisition on time and politely.
--
-- host_limits holds one token bucket per upstream host, shared by every
-- source that calls the host and by every syncer replica: a request takes a
-- token with one atomic UPDATE ... RETURNING, so N replicas spend one
-- budget. blocked_until is set from 429/503 Retry-After and from
-- X-RateLimit-Remaining: 0 + X-RateLimit-Reset; no replica sends a request
-- to the host before it. See docs/acquisition.md.
CREATE TABLE host_limits (
    host             text PRIMARY KEY,          -- host or host:port, lower case
    per_second       double precision NOT NULL CHECK (per_second > 0),
    burst            double precision NOT NULL CHECK (burst >= 1),
    tokens           double precision NOT NULL, -- may be negative: requests queued for a token
    updated_at       timestamptz NOT NULL,      -- when tokens was last computed
    blocked_until    timestamptz,               -- no request before this time
    blocked_reason   text,                      -- e.g. "429 Too Many Requests (Retry-After: 120)"
    last_status      integer,                   -- last error status (>= 400) seen from the host
    last_status_at   timestamptz,
    requests         bigint NOT NULL DEFAULT 0, -- tokens taken (requests let through), all replicas
    blocks           bigint NOT NULL DEFAULT 0, -- times the host asked us to stop
    created_at       timestamptz NOT NULL DEFAULT now()
);

-- When the status last changed (paused, resumed, disabled, completed).
ALTER TABLE sources ADD COLUMN status_changed_at timestamptz;

-- Operators look for sources that are disabled, completed or paused.
CREATE INDEX sources_status_idx ON sources (status) WHERE status <> 'active';
