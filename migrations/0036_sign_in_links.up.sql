-- lookout schema, version 34: sign-in links of a user's page (/me). An
-- assistant asks for one (MCP me_link, POST /v1/me/link) and hands it to
-- the person it acts for: it opens /me as the owner of the token that
-- minted it, once, within minutes. Only the link's SHA-256 is stored.
-- Owned by package tokens.
CREATE TABLE sign_in_links (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hash       bytea       NOT NULL UNIQUE,
    token_id   bigint      NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    owner      text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz
);
CREATE INDEX sign_in_links_expires_idx ON sign_in_links (expires_at);

-- audit_log.via 'me': a change a user made on their page (/me).
ALTER TABLE audit_log DROP CONSTRAINT audit_log_via_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_via_check CHECK (via IN ('api', 'mcp', 'cli', 'admin', 'config', 'me'));
