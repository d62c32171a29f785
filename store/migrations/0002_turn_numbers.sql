-- Turns are numbered per session (1, 2, 3 ...): a turn is known outside the
-- store as (session, number). The integer id stays as the row's internal key.
-- Existing turns are numbered in the order they started within their
-- session; the events and permissions that referred to a turn by its id
-- (turn_id, and "turn" in an event's data) refer to it by its number, in
-- columns renamed to say so.

CREATE TABLE turns_numbered (
	id                INTEGER PRIMARY KEY AUTOINCREMENT,
	session_id        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
	number            INTEGER NOT NULL CHECK (number > 0),
	agent             TEXT NOT NULL,
	prompt            TEXT NOT NULL,
	stop_reason       TEXT NOT NULL DEFAULT '',
	error             TEXT NOT NULL DEFAULT '',
	checkpoint_before TEXT NOT NULL DEFAULT '',
	checkpoint_after  TEXT NOT NULL DEFAULT '',
	started_at        INTEGER NOT NULL,
	ended_at          INTEGER,
	UNIQUE (session_id, number)
) STRICT;

INSERT INTO turns_numbered (id, session_id, number, agent, prompt, stop_reason, error,
	checkpoint_before, checkpoint_after, started_at, ended_at)
SELECT id, session_id, row_number() OVER (PARTITION BY session_id ORDER BY started_at, id),
	agent, prompt, stop_reason, error, checkpoint_before, checkpoint_after, started_at, ended_at
FROM turns;

-- Events whose data names a turn by id ({"turn": 12, ...}: turn.started,
-- turn.ended, turn.queued, turn.dequeued, worktree.restored) name it by
-- number. Only ids of a turn of the same session are rewritten.
UPDATE events SET data = json_set(data, '$.turn',
	(SELECT t.number FROM turns_numbered t
	 WHERE t.id = json_extract(events.data, '$.turn') AND t.session_id = events.session_id))
WHERE data LIKE '%"turn"%' AND json_valid(data) AND json_type(data, '$.turn') = 'integer'
	AND EXISTS (SELECT 1 FROM turns_numbered t
		WHERE t.id = json_extract(events.data, '$.turn') AND t.session_id = events.session_id);

UPDATE events SET turn_id = (SELECT t.number FROM turns_numbered t WHERE t.id = events.turn_id)
WHERE turn_id IS NOT NULL;
ALTER TABLE events RENAME COLUMN turn_id TO turn;

UPDATE permissions SET turn_id = (SELECT t.number FROM turns_numbered t WHERE t.id = permissions.turn_id)
WHERE turn_id IS NOT NULL;
ALTER TABLE permissions RENAME COLUMN turn_id TO turn;

DROP TABLE turns;
ALTER TABLE turns_numbered RENAME TO turns;
-- The rename carries the table's AUTOINCREMENT counter (sqlite_sequence),
-- which the copy of the ids has moved to the largest id: no id is reused.
