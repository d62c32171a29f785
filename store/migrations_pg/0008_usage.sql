-- What agents report they used. turn_usage holds the tokens of each turn
-- (from the prompt answer's usage); agent_usage the latest context
-- occupancy and cumulative cost of each agent session of a (session,
-- agent) pair, as usage_update reports them (cost is cumulative for the
-- agent session, in the agent's currency: the latest value is kept, and
-- totals sum over agent sessions, one currency at a time).
CREATE TABLE turn_usage (
	session_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
	turn          BIGINT NOT NULL,
	agent         TEXT NOT NULL,
	input_tokens  BIGINT NOT NULL DEFAULT 0,
	output_tokens BIGINT NOT NULL DEFAULT 0,
	cached_read   BIGINT NOT NULL DEFAULT 0,
	cached_write  BIGINT NOT NULL DEFAULT 0,
	thought       BIGINT NOT NULL DEFAULT 0,
	total         BIGINT NOT NULL DEFAULT 0,
	created_at    BIGINT NOT NULL,
	PRIMARY KEY (session_id, turn)
);

CREATE INDEX turn_usage_agent ON turn_usage (agent);

CREATE TABLE agent_usage (
	session_id       TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
	agent            TEXT NOT NULL,
	agent_session_id TEXT NOT NULL DEFAULT '',
	context_used     BIGINT NOT NULL DEFAULT 0,
	context_size     BIGINT NOT NULL DEFAULT 0,
	cost             DOUBLE PRECISION,
	currency         TEXT NOT NULL DEFAULT '',
	updated_at       BIGINT NOT NULL,
	PRIMARY KEY (session_id, agent, agent_session_id)
);

-- A session's own budget: NULL where it sets no limit.
CREATE TABLE session_budgets (
	session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
	tokens     BIGINT,
	cost       DOUBLE PRECISION,
	currency   TEXT NOT NULL DEFAULT '',
	updated_at BIGINT NOT NULL
);
