package httpapi

import (
	"context"
	"net/http"

	"github.com/agentpool/agentpool/hosts"
)

// Hosts is what the server needs to list the daemons sharing the store;
// *hosts.Heartbeat satisfies it.
type Hosts interface {
	List(ctx context.Context) ([]hosts.Status, error)
}

// listHosts: GET /v1/hosts → 200 with every host: its address, capacity,
// providers, warm agents and sessions at its last heartbeat, how long ago
// that was, whether it counts as alive, and which one answers (self).
func (s *Server) listHosts(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Hosts == nil {
		return &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon keeps no record of hosts"}
	}
	list, err := s.cfg.Hosts.List(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []hosts.Status{}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// Hosts lists the daemons sharing the store (GET /v1/hosts).
func (c *Client) Hosts(ctx context.Context) ([]hosts.Status, error) {
	var l []hosts.Status
	return l, c.call(ctx, http.MethodGet, "/v1/hosts", nil, &l)
}
