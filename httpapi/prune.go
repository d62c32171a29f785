package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentpool/agentpool/pool"
)

// Pruner is what the prune endpoint needs of the pool; *pool.Pool
// satisfies it. See pool.Pool.Prune.
type Pruner interface {
	Prune(ctx context.Context, req pool.PruneRequest) (pool.PruneResult, error)
}

var _ Pruner = (*pool.Pool)(nil)

// DefaultPruneAge is the age of the closed sessions that POST /v1/prune
// forgets when the request names none.
const DefaultPruneAge = 7 * 24 * time.Hour

// PruneRequest is the body of POST /v1/prune; an empty body prunes the
// sessions closed more than DefaultPruneAge ago.
type PruneRequest struct {
	// OlderThan is an age: a Go duration ("36h", "90m") or a number of
	// days ("7d"); "0" selects every closed session.
	OlderThan string `json:"older_than,omitempty"`
	// Branches deletes the pruned sessions' branches that hold commits
	// too (the result names each with its head commit). Empty branches
	// are always deleted.
	Branches bool `json:"branches,omitempty"`
	// DryRun reports what would be pruned and changes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// PruneResult is the answer of POST /v1/prune.
type PruneResult = pool.PruneResult

// ParseAge parses an age as PruneRequest.OlderThan takes it: a Go
// duration, or a whole number of days with the suffix "d".
func ParseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 || n > 100*365 {
			return 0, fmt.Errorf("age %q: want a whole number of days such as 7d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("age %q: want a duration such as 7d, 36h or 90m", s)
	}
	return d, nil
}

// prune: POST /v1/prune {older_than?, branches?, dry_run?} → 200 with the
// pool.PruneResult: the closed sessions it deleted (or would), and what
// became of each one's branch.
func (s *Server) prune(w http.ResponseWriter, r *http.Request) error {
	p, ok := s.pool.(Pruner)
	if !ok {
		return &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon cannot prune sessions"}
	}
	var req PruneRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	age := DefaultPruneAge
	if req.OlderThan != "" {
		var err error
		if age, err = ParseAge(req.OlderThan); err != nil {
			return badRequest("older_than", "%v", err)
		}
	}
	res, err := p.Prune(r.Context(), pool.PruneRequest{OlderThan: age, Branches: req.Branches, DryRun: req.DryRun})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// Prune deletes the closed sessions older than req.OlderThan (see
// PruneRequest), or with req.DryRun says which it would delete.
func (c *Client) Prune(ctx context.Context, req PruneRequest) (PruneResult, error) {
	var res PruneResult
	return res, c.call(ctx, http.MethodPost, "/v1/prune", req, &res)
}

// SessionsWithStatus lists the sessions whose status is status
// (pool.StatusOpen or pool.StatusClosed); "" lists every session.
func (c *Client) SessionsWithStatus(ctx context.Context, status string) ([]pool.Session, error) {
	path := "/v1/sessions"
	if status != "" {
		path += "?status=" + url.QueryEscape(status)
	}
	var l []pool.Session
	return l, c.call(ctx, http.MethodGet, path, nil, &l)
}
