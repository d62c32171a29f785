-- A prompt may carry a key its client chose (the Idempotency-Key header),
-- kept with the turn it started: the same prompt sent again with the same
-- key (after a connection broke mid-request, or through another host)
-- gets that turn instead of starting another.
ALTER TABLE turns ADD COLUMN request_key TEXT;
CREATE UNIQUE INDEX turns_request_key ON turns (session_id, request_key) WHERE request_key IS NOT NULL;

-- events loses its foreign key to sessions. The check ran a query per
-- inserted event (a third of the cost of the writer's insert), and it
-- checked nothing the writer does not: the writer locks the row of every
-- session in its batch before it inserts their events and refuses events
-- of a session without a row. DeleteClosedSession deletes a session's
-- events itself, after its row, in the same transaction. SQLite keeps
-- its foreign key, which costs little there.
ALTER TABLE events DROP CONSTRAINT events_session_id_fkey;
