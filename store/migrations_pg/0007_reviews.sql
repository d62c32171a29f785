-- The pull request opened for a session's branch: recorded by the CLI,
-- which opens it in the user's own environment, never by the daemon.
ALTER TABLE sessions ADD COLUMN pr_url TEXT NOT NULL DEFAULT '';

-- A review of a session's diff, sent to its agent as the prompt of turn
-- (session_id, turn). comments is JSON (a list of {path, line, side, text,
-- addressed, addressed_by}) that the store keeps as given; judged is true
-- once the comments were marked against the turn that answered them.
CREATE TABLE reviews (
	session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
	turn       BIGINT NOT NULL CHECK (turn > 0),
	summary    TEXT NOT NULL DEFAULT '',
	comments   TEXT NOT NULL,
	judged     BOOLEAN NOT NULL DEFAULT false,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (session_id, turn)
);
