package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/agentpool/agentpool/backends"
)

// agentSessionsResponse is the body of GET /v1/providers/{id}/sessions.
type agentSessionsResponse struct {
	Provider string                  `json:"provider"`
	Repo     string                  `json:"repo,omitempty"`
	Sessions []backends.AgentSession `json:"sessions"`
}

// agentSessions lists a provider's own sessions of a repository: those a
// session can be created from (POST /v1/sessions with agent_session).
func (s *Server) agentSessions(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	repo := r.URL.Query().Get("repo")
	if repo != "" && !filepath.IsAbs(repo) {
		return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Field: "repo", Message: fmt.Sprintf("repo %q is not an absolute path", repo)}
	}
	if s.cfg.AgentSessions == nil {
		return &Error{Status: http.StatusConflict, Code: CodeUnsupported, Message: "this daemon cannot list agents' sessions"}
	}
	ctx, cancel := s.longContext(r)
	defer cancel()
	list, err := s.cfg.AgentSessions(ctx, id, repo)
	if err != nil {
		if ctx.Err() != nil {
			return s.shutdownErr(err)
		}
		if errors.Is(err, backends.ErrUnsupported) {
			return &Error{Status: http.StatusConflict, Code: CodeUnsupported,
				Message: fmt.Sprintf("agent %q does not list its sessions (no session/list capability)", id)}
		}
		if ae := errorFor(err); ae.Code == CodeInternal {
			return &Error{Status: http.StatusBadGateway, Code: CodeProbeFailed, Message: err.Error()}
		}
		return err
	}
	writeJSON(w, http.StatusOK, agentSessionsResponse{Provider: id, Repo: repo, Sessions: list})
	return nil
}
