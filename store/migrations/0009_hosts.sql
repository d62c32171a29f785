-- The daemons that share this database, each with what it heartbeats:
-- the address other hosts and clients reach it at, its capacity (its
-- max_warm), the providers it can run (a JSON array of ids), and its warm
-- agents and open sessions at the last heartbeat. One host on SQLite;
-- several on PostgreSQL.
CREATE TABLE hosts (
	id           TEXT PRIMARY KEY,
	advertise    TEXT NOT NULL,
	capacity     INTEGER NOT NULL,
	providers    TEXT NOT NULL DEFAULT '[]',
	warm         INTEGER NOT NULL DEFAULT 0,
	sessions     INTEGER NOT NULL DEFAULT 0,
	version      TEXT NOT NULL DEFAULT '',
	started_at   INTEGER NOT NULL,
	heartbeat_at INTEGER NOT NULL
) STRICT;
