-- What each agent of a session last advertised (its session modes, config
-- options and slash commands) as a JSON object, so that the API and the
-- page can show and validate them while the agent is not running.
ALTER TABLE agent_sessions ADD COLUMN advertised TEXT;
