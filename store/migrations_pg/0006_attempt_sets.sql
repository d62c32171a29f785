-- Attempt sets: one prompt run as several sessions side by side. The body
-- is the set as JSON (its attempts, their results and checks), written
-- whole on every change; the sessions themselves are in sessions.
CREATE TABLE attempt_sets (
    id         TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    body       TEXT NOT NULL
);
