-- events loses its foreign key to sessions. The check ran a query per
-- inserted event (a third of the cost of the writer's insert), and it
-- checked nothing the writer does not: the writer locks the row of every
-- session in its batch before it inserts their events and refuses events
-- of a session without a row. DeleteClosedSession deletes a session's
-- events itself, after its row, in the same transaction. SQLite keeps
-- its foreign key, which costs little there.
ALTER TABLE events DROP CONSTRAINT events_session_id_fkey;
