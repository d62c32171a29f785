package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentpool/agentpool/pool"
)

// Evicter is what the eviction endpoint needs of the pool; *pool.Pool
// satisfies it. Evict stops the warm backend of (session, agent) and
// returns once it has stopped. Errors wrap pool.ErrBusy (it runs a turn or
// is starting), pool.ErrNotFound (no such backend running) or
// pool.ErrClosed (the pool is shutting down).
type Evicter interface {
	Evict(ctx context.Context, session, agent string) error
}

var _ Evicter = (*pool.Pool)(nil)

// evictBackend: DELETE /v1/pool/{session}/{agent} stops that warm agent
// (204). A busy agent is 409 busy; no such running agent 404; a pool
// without eviction 501.
func (s *Server) evictBackend(w http.ResponseWriter, r *http.Request) error {
	ev, ok := s.pool.(Evicter)
	if !ok {
		return &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon cannot evict agents"}
	}
	if err := ev.Evict(r.Context(), r.PathValue("session"), r.PathValue("agent")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// Evict stops the warm agent of a session (see Evicter); it returns once
// the agent has stopped. A busy agent is an *Error with CodeBusy, an agent
// that is not running one with CodeNotFound.
func (c *Client) Evict(ctx context.Context, session, agent string) error {
	return c.call(ctx, http.MethodDelete, "/v1/pool/"+url.PathEscape(session)+"/"+url.PathEscape(agent), nil, nil)
}
