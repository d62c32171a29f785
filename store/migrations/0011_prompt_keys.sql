-- A prompt may carry a key its client chose (the Idempotency-Key header),
-- kept with the turn it started: the same prompt sent again with the same
-- key (after a connection broke mid-request) gets that turn instead of
-- starting another.
ALTER TABLE turns ADD COLUMN request_key TEXT;
CREATE UNIQUE INDEX turns_request_key ON turns (session_id, request_key) WHERE request_key IS NOT NULL;
