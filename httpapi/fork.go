package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/agentpool/agentpool/pool"
)

// ForkRequest is the body of POST /v1/sessions/{id}/fork; every field is
// optional.
type ForkRequest struct {
	// Agent is the fork's first agent (default: the session's active one).
	Agent string `json:"agent,omitempty"`
	// Turn forks at the end of that turn of the session (its checkpoint
	// and its history up to it); 0 or absent forks the session as it is
	// now, uncommitted changes included.
	Turn int64 `json:"turn,omitempty"`
	// Title is the fork's title (default: "fork of " the session's).
	Title string `json:"title,omitempty"`
}

// forker is what the pool must also be to fork sessions.
type forker interface {
	Fork(ctx context.Context, req pool.ForkRequest) (pool.Session, error)
}

// fork: POST /v1/sessions/{id}/fork {agent?, turn?, title?} → 201 with the
// new session. It runs on the session's owner (the route is forwarded
// there), where its uncommitted changes are.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) error {
	var req ForkRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if req.Turn < 0 {
		return badRequest("turn", "field \"turn\" is a turn number of the session (1 for its first turn), or 0 for its state now")
	}
	f, ok := s.pool.(forker)
	if !ok {
		return &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon cannot fork sessions"}
	}
	sess, err := f.Fork(r.Context(), pool.ForkRequest{Session: r.PathValue("id"), Agent: req.Agent, Turn: req.Turn, Title: req.Title})
	if err != nil {
		var fe interface{ FieldName() string }
		if errors.As(err, &fe) {
			e := errorFor(err)
			e.Field = fe.FieldName()
			return e
		}
		return err
	}
	writeJSON(w, http.StatusCreated, sess)
	return nil
}

// Fork forks a session (POST /v1/sessions/{id}/fork) and returns the new
// one.
func (c *Client) Fork(ctx context.Context, session string, req ForkRequest) (pool.Session, error) {
	var out pool.Session
	return out, c.call(ctx, http.MethodPost, sessionPath(session, "fork"), req, &out)
}
