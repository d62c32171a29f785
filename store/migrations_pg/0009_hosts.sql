-- The daemons that share this database, each with what it heartbeats:
-- the address other hosts and clients reach it at, its capacity (its
-- max_warm), the providers it can run (a JSON array of ids), and its warm
-- agents and open sessions at the last heartbeat.
CREATE TABLE hosts (
	id           TEXT PRIMARY KEY,
	advertise    TEXT NOT NULL,
	capacity     BIGINT NOT NULL,
	providers    TEXT NOT NULL DEFAULT '[]',
	warm         BIGINT NOT NULL DEFAULT 0,
	sessions     BIGINT NOT NULL DEFAULT 0,
	version      TEXT NOT NULL DEFAULT '',
	started_at   BIGINT NOT NULL,
	heartbeat_at BIGINT NOT NULL
);
