package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/agentpool/agentpool/pool"
)

// Error codes of POST /v1/sessions/{id}/merge, besides the common ones.
const (
	// CodeConflict (409): the merge would conflict, the checkout to update
	// is not clean, or the branch is in use by another session; nothing
	// was changed and the message says which paths.
	CodeConflict = "conflict"
	// CodeNotImplemented (501): the pool cannot merge sessions.
	CodeNotImplemented = "not_implemented"
)

// Merger is what the merge endpoint needs of the pool; *pool.Pool
// satisfies it. Errors wrap pool.ErrConflict (nothing changed), or the
// pool's other sentinels.
type Merger interface {
	Merge(ctx context.Context, session string, req pool.MergeRequest) (pool.MergeResult, error)
}

var _ Merger = (*pool.Pool)(nil)

// MergeRequest is the body of POST /v1/sessions/{id}/merge; an empty body
// merges the session into its base.
type MergeRequest = pool.MergeRequest

// mergeSession: POST /v1/sessions/{id}/merge {into?, squash?, rebase?} →
// 200 with the pool.MergeResult.
func (s *Server) mergeSession(w http.ResponseWriter, r *http.Request) error {
	m, ok := s.pool.(Merger)
	if !ok {
		return &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon cannot merge sessions"}
	}
	var req MergeRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if req.Squash && req.Rebase {
		return badRequest("rebase", "\"squash\" and \"rebase\" do not go together")
	}
	res, err := m.Merge(r.Context(), r.PathValue("id"), req)
	if errors.Is(err, pool.ErrConflict) {
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: err.Error()}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// MergeSession merges a session's branch into its base or req.Into, or
// with req.Rebase brings it up to date; a refusal is an *Error with
// CodeConflict.
func (c *Client) MergeSession(ctx context.Context, id string, req MergeRequest) (pool.MergeResult, error) {
	var res pool.MergeResult
	return res, c.call(ctx, http.MethodPost, sessionPath(id, "merge"), req, &res)
}

// workCommitter is what POST /v1/sessions/{id}/commit needs of the pool;
// *pool.Pool satisfies it.
type workCommitter interface {
	CommitWork(ctx context.Context, session string) (pool.CommitResult, error)
}

var _ workCommitter = (*pool.Pool)(nil)

// commitWork: POST /v1/sessions/{id}/commit → 200 with the
// pool.CommitResult: the session's uncommitted work is on its branch.
func (s *Server) commitWork(w http.ResponseWriter, r *http.Request) error {
	wc, ok := s.pool.(workCommitter)
	if !ok {
		return &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon cannot commit a session's work"}
	}
	res, err := wc.CommitWork(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
