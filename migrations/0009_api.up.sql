-- lookout schema, version 9: the api deployment's tables. See docs/api.md
-- and docs/schema.md.

-- api_tokens: bearer tokens of the HTTP API, one row per token. The token
-- itself is never stored: hash is its SHA-256 (the token has 256 bits of
-- randomness, so a plain hash is enough), prefix its first characters so
-- that people can tell tokens apart. Owned by internal/tokens.
CREATE TABLE api_tokens (
    id            bigserial PRIMARY KEY,
    owner         text        NOT NULL CHECK (owner <> ''),
    scope         text        NOT NULL CHECK (scope IN ('user', 'admin')),
    name          text        NOT NULL DEFAULT '',
    prefix        text        NOT NULL,
    hash          bytea       NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    last_used_at  timestamptz
);

CREATE INDEX api_tokens_owner_idx ON api_tokens (owner, id);

-- audit_log: every change made through the API (or MCP, or the api
-- binary's token commands): who (actor and token), what (action on a
-- kind of object), when, and the object before and after (secrets
-- never included). Owned by internal/audit.
CREATE TABLE audit_log (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,
    token_id    bigint,
    via         text        NOT NULL CHECK (via IN ('api', 'mcp', 'cli')),
    action      text        NOT NULL,
    kind        text        NOT NULL,
    target      text        NOT NULL,
    owner       text        NOT NULL,
    before      jsonb,
    after       jsonb,
    request_id  text
);

CREATE INDEX audit_log_owner_idx ON audit_log (owner, id);
CREATE INDEX audit_log_target_idx ON audit_log (kind, target, id);

-- idempotency_keys: the first answer to a create sent with an
-- Idempotency-Key header, kept so that a retry with the same key and body
-- gets it again and creates nothing. Written in the create's transaction;
-- response is sealed (encrypted) when it carries a secret. Owned by
-- internal/idempotency.
CREATE TABLE idempotency_keys (
    owner         text        NOT NULL,
    key           text        NOT NULL,
    operation     text        NOT NULL,
    request_hash  text        NOT NULL,
    status        integer     NOT NULL,
    response      bytea       NOT NULL,
    sealed        boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, key)
);

CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
