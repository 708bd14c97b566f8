-- The agent_tasks table of the seed (seeds/agent-tasks-postgres-bus.fr.txt):
-- a PostgreSQL table used as the agents' bus. The examples read it; they
-- never write it. The index on (updated_at, id) serves the keyset pages of
-- the agent-tasks source (docs/connectors.md#postgres).
CREATE TABLE IF NOT EXISTS agent_tasks (
  id                  SERIAL PRIMARY KEY,
  title               TEXT NOT NULL,
  description         TEXT,
  agent_name          TEXT,                    -- the agent in charge
  status              TEXT DEFAULT 'pending',  -- pending | in_progress | done | failed | cancelled
  task_role           TEXT DEFAULT 'worker',   -- worker | surveillance | team_spec
  task_type           TEXT DEFAULT 'oneshot',  -- oneshot | recurring | executor | scheduled
  executor            VARCHAR(20),             -- linux | windows | any
  priority            INTEGER DEFAULT 3,
  surveillance_score  SMALLINT,                -- 0-10, set by the surveillance agent
  acceptance_criteria JSONB,
  result_json         JSONB,
  correction_count    INTEGER DEFAULT 0,       -- times a weak result was sent back
  metadata            JSONB,
  created_at          TIMESTAMPTZ DEFAULT NOW(),
  updated_at          TIMESTAMPTZ DEFAULT NOW()
);
CREATE INDEX IF NOT EXISTS agent_tasks_updated_at_id ON agent_tasks (updated_at, id);
