-- Turns are numbered per session (1, 2, 3 ...): a turn is known outside the
-- store as (session, number); the integer id stays as the row's internal
-- key. Events and permissions refer to a turn by its number.
--
-- sessions.last_turn, PostgreSQL's own, is the last number handed out in
-- the session: a turn's row takes the next one by moving it, so that two
-- daemons starting turns of one session at once get two numbers (a
-- number computed from the turns seen would be the same for both).
--
-- SQLite's 0002 also renumbers the rows an earlier version wrote; a
-- PostgreSQL database has none from before this version, so only the
-- schema changes here.

DROP INDEX turns_session;
ALTER TABLE sessions ADD COLUMN last_turn BIGINT NOT NULL DEFAULT 0;
ALTER TABLE turns ADD COLUMN number BIGINT NOT NULL CHECK (number > 0);
ALTER TABLE turns ADD CONSTRAINT turns_session_id_number_key UNIQUE (session_id, number);
ALTER TABLE events RENAME COLUMN turn_id TO turn;
ALTER TABLE permissions RENAME COLUMN turn_id TO turn;
