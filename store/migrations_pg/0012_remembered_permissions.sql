-- The answers a session remembers: a person's "always allow" or "always
-- reject" of one agent's action (allow_always, reject_always), kept with
-- the session so that they survive a restart of a host, an eviction, a
-- move to another host and a takeover. Closing the session forgets them;
-- deleting it deletes them.
CREATE TABLE remembered_permissions (
	session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
	agent       TEXT NOT NULL,
	action      TEXT NOT NULL,
	option_kind TEXT NOT NULL,
	request_id  TEXT NOT NULL DEFAULT '',
	decided_at  BIGINT NOT NULL,
	PRIMARY KEY (session_id, agent, action)
);
