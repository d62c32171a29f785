package httpapi

import (
	"context"
	"net/http"

	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
)

// RememberKeeper is what the remembered-answers endpoints need of the
// pool; *pool.Pool satisfies it. Remembered lists the "always" answers a
// session keeps (by agent and kind of action); ForgetRemembered takes them
// all back and says how many there were. Both wrap pool.ErrNotFound for
// an unknown session.
type RememberKeeper interface {
	Remembered(ctx context.Context, session string) ([]permission.Remembered, error)
	ForgetRemembered(ctx context.Context, session string) (int, error)
}

var _ RememberKeeper = (*pool.Pool)(nil)

// Forgotten is the answer of DELETE /v1/sessions/{id}/permissions/remembered:
// how many remembered answers were taken back.
type Forgotten struct {
	Forgotten int `json:"forgotten"`
}

// rememberKeeper returns the pool as a RememberKeeper, or a 501.
func (s *Server) rememberKeeper() (RememberKeeper, error) {
	k, ok := s.pool.(RememberKeeper)
	if !ok {
		return nil, &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon keeps no remembered permission answers"}
	}
	return k, nil
}

// remembered: GET /v1/sessions/{id}/permissions/remembered, the answers
// ("Always allow in this session", "Always reject") the session keeps,
// each an agent, a kind of action and the answer's kind.
func (s *Server) remembered(w http.ResponseWriter, r *http.Request) error {
	k, err := s.rememberKeeper()
	if err != nil {
		return err
	}
	list, err := k.Remembered(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if list == nil {
		list = []permission.Remembered{}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// forgetRemembered: DELETE /v1/sessions/{id}/permissions/remembered takes
// back every answer the session remembers (200 with how many): its agents'
// next requests are asked again.
func (s *Server) forgetRemembered(w http.ResponseWriter, r *http.Request) error {
	k, err := s.rememberKeeper()
	if err != nil {
		return err
	}
	n, err := k.ForgetRemembered(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, Forgotten{Forgotten: n})
	return nil
}

// Remembered lists the answers a session remembers (see RememberKeeper).
func (c *Client) Remembered(ctx context.Context, session string) ([]permission.Remembered, error) {
	var l []permission.Remembered
	return l, c.call(ctx, http.MethodGet, sessionPath(session, "permissions", "remembered"), nil, &l)
}

// ForgetRemembered takes back every answer a session remembers and returns
// how many there were.
func (c *Client) ForgetRemembered(ctx context.Context, session string) (int, error) {
	var f Forgotten
	err := c.call(ctx, http.MethodDelete, sessionPath(session, "permissions", "remembered"), nil, &f)
	return f.Forgotten, err
}
