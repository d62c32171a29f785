package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentpool/agentpool/attempts"
	"github.com/agentpool/agentpool/pool"
)

// maxAttemptsWait is the longest ?wait= of GET /v1/attempts/{id}.
const maxAttemptsWait = 60 * time.Second

// Attempts runs attempt sets; *attempts.Manager satisfies it. Errors are
// *attempts.FieldError (400), attempts.ErrNotFound (404),
// attempts.ErrConflict (409), pool.ErrConflict (a refused merge, 409), or
// the pool's.
type Attempts interface {
	Start(ctx context.Context, req attempts.Request) (attempts.Set, error)
	List() []attempts.Set
	Get(id string) (attempts.Set, error)
	Wait(ctx context.Context, id string) (attempts.Set, error)
	Pick(ctx context.Context, id string, req attempts.PickRequest) (attempts.Set, pool.MergeResult, error)
}

var _ Attempts = (*attempts.Manager)(nil)

// PickedSet is the answer of POST /v1/attempts/{id}/pick: the set and the
// merge as POST /v1/sessions/{id}/merge answers it.
type PickedSet struct {
	attempts.Set
	Merge pool.MergeResult `json:"merge"`
}

// attemptsErr maps the attempts package's errors to API errors.
func attemptsErr(err error) error {
	var fe *attempts.FieldError
	switch {
	case errors.As(err, &fe):
		return badRequest(fe.Field, "%s", fe.Message)
	case errors.Is(err, attempts.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: err.Error()}
	case errors.Is(err, attempts.ErrConflict), errors.Is(err, pool.ErrConflict):
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: err.Error()}
	}
	return err
}

// attemptsOr501 returns the configured Attempts or a 501.
func (s *Server) attemptsOr501() (Attempts, error) {
	if s.cfg.Attempts == nil {
		return nil, &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon cannot run attempts"}
	}
	return s.cfg.Attempts, nil
}

// startAttempts: POST /v1/attempts → 201 with the set.
func (s *Server) startAttempts(w http.ResponseWriter, r *http.Request) error {
	a, err := s.attemptsOr501()
	if err != nil {
		return err
	}
	var req attempts.Request
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	set, err := a.Start(r.Context(), req)
	if err != nil {
		return attemptsErr(err)
	}
	writeJSON(w, http.StatusCreated, set)
	return nil
}

// listAttempts: GET /v1/attempts → 200 {"attempts": [...]}, newest first.
func (s *Server) listAttempts(w http.ResponseWriter, r *http.Request) error {
	a, err := s.attemptsOr501()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"attempts": a.List()})
	return nil
}

// getAttempts: GET /v1/attempts/{id}[?wait=SECONDS] → 200 with the set,
// after waiting (at most 60 s) for it to end or for one of its attempts to
// wait for a permission answer (each attempt lists its
// pending_permissions).
func (s *Server) getAttempts(w http.ResponseWriter, r *http.Request) error {
	a, err := s.attemptsOr501()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	var set attempts.Set
	if v := r.URL.Query().Get("wait"); v != "" {
		secs, perr := strconv.ParseFloat(v, 64)
		if perr != nil || secs < 0 {
			return badRequest("wait", "wait must be a number of seconds, at most 60")
		}
		d := min(time.Duration(secs*float64(time.Second)), maxAttemptsWait)
		ctx, cancel := s.longContext(r)
		defer cancel()
		ctx, cancelT := context.WithTimeout(ctx, d)
		defer cancelT()
		set, err = a.Wait(ctx, id)
	} else {
		set, err = a.Get(id)
	}
	if err != nil {
		return attemptsErr(err)
	}
	writeJSON(w, http.StatusOK, set)
	return nil
}

// pickAttempt: POST /v1/attempts/{id}/pick → 200 with the set and merge.
func (s *Server) pickAttempt(w http.ResponseWriter, r *http.Request) error {
	a, err := s.attemptsOr501()
	if err != nil {
		return err
	}
	var req attempts.PickRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	set, res, err := a.Pick(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return attemptsErr(err)
	}
	writeJSON(w, http.StatusOK, PickedSet{Set: set, Merge: res})
	return nil
}

// StartAttempts starts an attempt set.
func (c *Client) StartAttempts(ctx context.Context, req attempts.Request) (attempts.Set, error) {
	var out attempts.Set
	return out, c.call(ctx, http.MethodPost, "/v1/attempts", req, &out)
}

// ListAttempts lists the attempt sets, newest first.
func (c *Client) ListAttempts(ctx context.Context) ([]attempts.Set, error) {
	var out struct {
		Attempts []attempts.Set `json:"attempts"`
	}
	return out.Attempts, c.call(ctx, http.MethodGet, "/v1/attempts", nil, &out)
}

// GetAttempts returns an attempt set, waiting up to wait (0: not at all,
// at most 60 s) for it to end or for one of its attempts to wait for a
// permission answer.
func (c *Client) GetAttempts(ctx context.Context, id string, wait time.Duration) (attempts.Set, error) {
	var out attempts.Set
	p := "/v1/attempts/" + url.PathEscape(id)
	if wait > 0 {
		p += "?wait=" + strconv.Itoa(int(wait.Seconds()))
	}
	return out, c.call(ctx, http.MethodGet, p, nil, &out)
}

// PickAttempt picks an attempt of a set.
func (c *Client) PickAttempt(ctx context.Context, id string, req attempts.PickRequest) (PickedSet, error) {
	var out PickedSet
	return out, c.call(ctx, http.MethodPost, "/v1/attempts/"+url.PathEscape(id)+"/pick", req, &out)
}
