-- lookout schema, version 19: request budgets keyed by what the provider
-- limits. GitHub, Notion and most APIs limit per token, not per host: a
-- request that carries a credential (an Authorization header, an API-key
-- or token header or query parameter) spends the budget of its host and
-- credential — one bucket per token, shared by every source and replica
-- that uses it — and a request without one the host's. credential is a
-- fingerprint (a truncated salted SHA-256), never the secret; '' for
-- requests without one. See docs/acquisition.md#politeness.
ALTER TABLE host_limits ADD COLUMN credential text NOT NULL DEFAULT '';
ALTER TABLE host_limits DROP CONSTRAINT host_limits_pkey;
ALTER TABLE host_limits ADD PRIMARY KEY (host, credential);

-- per_second 0: a host without a shared budget (a loopback host under the
-- built-in default), whose row only records blocks and statuses.
ALTER TABLE host_limits DROP CONSTRAINT host_limits_per_second_check;
ALTER TABLE host_limits ADD CONSTRAINT host_limits_per_second_check CHECK (per_second >= 0);
