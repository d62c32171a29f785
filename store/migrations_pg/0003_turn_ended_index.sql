-- Every ended turn has one turn.ended event on its session's stream. This
-- partial index lets the startup check find, per turn, whether its
-- turn.ended exists without reading the session's other events, so that
-- turns an earlier version ended without their event can be repaired.
CREATE INDEX events_turn_ended ON events (session_id, turn) WHERE type = 'turn.ended';
