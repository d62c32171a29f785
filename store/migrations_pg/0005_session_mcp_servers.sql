-- A session's own MCP servers, as JSON (an object keyed by server name),
-- passed again to its agents whenever they start or resume. Their env and
-- header values are secrets: the database is the daemon's alone (0600).
ALTER TABLE sessions ADD COLUMN mcp_servers TEXT NOT NULL DEFAULT '';
