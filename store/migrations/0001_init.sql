-- The initial schema. Times are UTC unix nanoseconds; JSON is stored as text.

CREATE TABLE sessions (
	id           TEXT PRIMARY KEY,
	repo         TEXT NOT NULL,
	base_ref     TEXT NOT NULL DEFAULT '',
	title        TEXT NOT NULL DEFAULT '',
	active_agent TEXT NOT NULL DEFAULT '',
	status       TEXT NOT NULL,
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL
) STRICT;

CREATE TABLE session_worktrees (
	session_id  TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
	path        TEXT NOT NULL,
	branch      TEXT NOT NULL,
	base_commit TEXT NOT NULL DEFAULT '',
	created_at  INTEGER NOT NULL,
	removed_at  INTEGER
) STRICT;

CREATE TABLE agent_sessions (
	session_id         TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
	agent              TEXT NOT NULL,
	kind               TEXT NOT NULL,
	agent_session_id   TEXT NOT NULL DEFAULT '',
	pid                INTEGER NOT NULL DEFAULT 0,
	pgid               INTEGER NOT NULL DEFAULT 0,
	pid_start_ticks    INTEGER NOT NULL DEFAULT 0,
	status             TEXT NOT NULL CHECK (status IN ('idle', 'active', 'crashed', 'closed')),
	restarts           INTEGER NOT NULL DEFAULT 0,
	resume_supported   INTEGER NOT NULL DEFAULT 0,
	mode               TEXT NOT NULL DEFAULT '',
	config_options     TEXT,
	provider_spec_hash TEXT NOT NULL DEFAULT '',
	last_active_at     INTEGER NOT NULL,
	created_at         INTEGER NOT NULL,
	PRIMARY KEY (session_id, agent)
) STRICT;

CREATE INDEX agent_sessions_status ON agent_sessions (status);

CREATE TABLE turns (
	id                INTEGER PRIMARY KEY AUTOINCREMENT,
	session_id        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
	agent             TEXT NOT NULL,
	prompt            TEXT NOT NULL,
	stop_reason       TEXT NOT NULL DEFAULT '',
	error             TEXT NOT NULL DEFAULT '',
	checkpoint_before TEXT NOT NULL DEFAULT '',
	checkpoint_after  TEXT NOT NULL DEFAULT '',
	started_at        INTEGER NOT NULL,
	ended_at          INTEGER
) STRICT;

CREATE INDEX turns_session ON turns (session_id, id);

CREATE TABLE events (
	session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
	seq        INTEGER NOT NULL CHECK (seq > 0),
	turn_id    INTEGER,
	agent      TEXT NOT NULL DEFAULT '',
	type       TEXT NOT NULL,
	data       TEXT,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (session_id, seq)
) STRICT;

CREATE TABLE permissions (
	id           TEXT PRIMARY KEY,
	session_id   TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
	turn_id      INTEGER,
	agent        TEXT NOT NULL DEFAULT '',
	action       TEXT NOT NULL DEFAULT '',
	risk         TEXT NOT NULL DEFAULT '',
	request      TEXT,
	decision     TEXT NOT NULL DEFAULT '',
	decided_by   TEXT NOT NULL DEFAULT '',
	option_kind  TEXT NOT NULL DEFAULT '',
	requested_at INTEGER NOT NULL,
	decided_at   INTEGER
) STRICT;

CREATE INDEX permissions_session ON permissions (session_id, requested_at);
