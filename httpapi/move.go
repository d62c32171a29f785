package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentpool/agentpool/pool"
)

// Mover is what POST /v1/sessions/{id}/move needs of the pool: a pool
// that runs alone (one host) need not have it.
type Mover interface {
	Move(ctx context.Context, id, to, reason string) (pool.MoveResult, error)
}

// MoveRequest is the body of POST /v1/sessions/{id}/move.
type MoveRequest struct {
	// Host is the host to hand the session to.
	Host string `json:"host"`
}

// moveRoutes registers the hand-over of a session to another host.
func (s *Server) moveRoutes() {
	s.route("POST /v1/sessions/{id}/move", s.moveSession, false)
}

// moveSession hands an idle session, with its pushed work, to another
// host (served by the session's owner: others forward it there).
func (s *Server) moveSession(w http.ResponseWriter, r *http.Request) error {
	var req MoveRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if req.Host == "" {
		return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Field: "host", Message: "host is required: the host to move the session to (see GET /v1/hosts)"}
	}
	mv, ok := s.pool.(Mover)
	if !ok {
		return &Error{Status: http.StatusConflict, Code: CodeUnsupported, Message: "this daemon runs alone: there is no other host to move a session to"}
	}
	res, err := mv.Move(r.Context(), r.PathValue("id"), req.Host, "move")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// MoveSession hands session to host.
func (c *Client) MoveSession(ctx context.Context, session, host string) (pool.MoveResult, error) {
	var out pool.MoveResult
	err := c.call(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(session)+"/move", MoveRequest{Host: host}, &out)
	return out, err
}
