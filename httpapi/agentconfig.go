package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// AgentConfigurer is what the agent config endpoints need of the pool;
// *pool.Pool satisfies it. See pool.Pool.AgentConfig and SetAgentConfig.
type AgentConfigurer interface {
	AgentConfig(ctx context.Context, session, agent string) (pool.AgentConfig, error)
	SetAgentConfig(ctx context.Context, session, agent string, ch pool.ConfigChange) (pool.ConfigResult, error)
}

var _ AgentConfigurer = (*pool.Pool)(nil)

// CodeNotAdvertised is the code of a 409: the agent has not said yet what
// modes and options it offers (it never started in the session).
const CodeNotAdvertised = "not_advertised"

// ConfigChange is the body of PUT /v1/sessions/{id}/agents/{agent}/config:
// a mode, and config options by id or category ({"model": "..."}), each
// optional but not both.
type ConfigChange = pool.ConfigChange

// CommandList is the answer of GET /v1/sessions/{id}/agents/{agent}/commands.
type CommandList struct {
	Session  string             `json:"session"`
	Agent    string             `json:"agent"`
	Known    bool               `json:"known"`
	Commands []backends.Command `json:"commands"`
}

func (s *Server) configurer() (AgentConfigurer, error) {
	c, ok := s.pool.(AgentConfigurer)
	if !ok {
		return nil, &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon cannot configure agents"}
	}
	return c, nil
}

// getAgentConfig: GET /v1/sessions/{id}/agents/{agent}/config → 200 with
// the pool.AgentConfig: the agent's modes (available, current), config
// options (id, name, category, type, choices, current), slash commands
// and the session's own choices; "known" is false before the agent first
// started in the session.
func (s *Server) getAgentConfig(w http.ResponseWriter, r *http.Request) error {
	c, err := s.configurer()
	if err != nil {
		return err
	}
	cfg, err := c.AgentConfig(r.Context(), r.PathValue("id"), r.PathValue("agent"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, cfg)
	return nil
}

// putAgentConfig: PUT /v1/sessions/{id}/agents/{agent}/config {mode?,
// options?} → 200 with the pool.ConfigResult. Each value is checked
// against what the agent advertised (400 naming the unknown mode, option
// or value and listing the valid ones; 409 not_advertised before the agent
// ever started). A running agent takes it at once ("applied": true);
// otherwise it is stored and applied at the agent's next start. Either
// way it is re-applied after every restart.
func (s *Server) putAgentConfig(w http.ResponseWriter, r *http.Request) error {
	c, err := s.configurer()
	if err != nil {
		return err
	}
	var ch ConfigChange
	if err := decodeJSON(r, &ch, true); err != nil {
		return err
	}
	res, err := c.SetAgentConfig(r.Context(), r.PathValue("id"), r.PathValue("agent"), ch)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// agentCommands: GET /v1/sessions/{id}/agents/{agent}/commands → 200 with
// the agent's slash commands as last announced (a CommandList).
func (s *Server) agentCommands(w http.ResponseWriter, r *http.Request) error {
	c, err := s.configurer()
	if err != nil {
		return err
	}
	cfg, err := c.AgentConfig(r.Context(), r.PathValue("id"), r.PathValue("agent"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, CommandList{Session: cfg.Session, Agent: cfg.Agent, Known: cfg.Known, Commands: cfg.Commands})
	return nil
}

func agentConfigPath(session, agent string) string {
	return "/v1/sessions/" + url.PathEscape(session) + "/agents/" + url.PathEscape(agent) + "/config"
}

// AgentConfig returns what agent advertises in session and what the
// session chose for it.
func (c *Client) AgentConfig(ctx context.Context, session, agent string) (pool.AgentConfig, error) {
	var res pool.AgentConfig
	return res, c.call(ctx, http.MethodGet, agentConfigPath(session, agent), nil, &res)
}

// SetAgentConfig sets agent's mode and config options in session.
func (c *Client) SetAgentConfig(ctx context.Context, session, agent string, ch ConfigChange) (pool.ConfigResult, error) {
	var res pool.ConfigResult
	return res, c.call(ctx, http.MethodPut, agentConfigPath(session, agent), ch, &res)
}

// AgentCommands lists agent's slash commands in session.
func (c *Client) AgentCommands(ctx context.Context, session, agent string) (CommandList, error) {
	var res CommandList
	path := "/v1/sessions/" + url.PathEscape(session) + "/agents/" + url.PathEscape(agent) + "/commands"
	return res, c.call(ctx, http.MethodGet, path, nil, &res)
}
