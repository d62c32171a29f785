-- What agents report they used. turn_usage holds the tokens of each turn
-- (from the prompt answer's usage); agent_usage the latest context
-- occupancy and cumulative cost of each agent session of a (session,
-- agent) pair, as usage_update reports them (cost is cumulative for the
-- agent session, in the agent's currency: the latest value is kept, and
-- totals sum over agent sessions, one currency at a time).
CREATE TABLE turn_usage (
	session_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
	turn          INTEGER NOT NULL,
	agent         TEXT NOT NULL,
	input_tokens  INTEGER NOT NULL DEFAULT 0,
	output_tokens INTEGER NOT NULL DEFAULT 0,
	cached_read   INTEGER NOT NULL DEFAULT 0,
	cached_write  INTEGER NOT NULL DEFAULT 0,
	thought       INTEGER NOT NULL DEFAULT 0,
	total         INTEGER NOT NULL DEFAULT 0,
	created_at    INTEGER NOT NULL,
	PRIMARY KEY (session_id, turn)
) STRICT;

CREATE INDEX turn_usage_agent ON turn_usage (agent);

CREATE TABLE agent_usage (
	session_id       TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
	agent            TEXT NOT NULL,
	agent_session_id TEXT NOT NULL DEFAULT '',
	context_used     INTEGER NOT NULL DEFAULT 0,
	context_size     INTEGER NOT NULL DEFAULT 0,
	cost             REAL,
	currency         TEXT NOT NULL DEFAULT '',
	updated_at       INTEGER NOT NULL,
	PRIMARY KEY (session_id, agent, agent_session_id)
) STRICT;

-- A session's own budget: NULL where it sets no limit.
CREATE TABLE session_budgets (
	session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
	tokens     INTEGER,
	cost       REAL,
	currency   TEXT NOT NULL DEFAULT '',
	updated_at INTEGER NOT NULL
) STRICT;
