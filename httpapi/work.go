package httpapi

import (
	"net/http"
	"strings"

	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
)

// AnswerRequest is the body of POST /v1/sessions/{id}/permissions/{request}.
type AnswerRequest struct {
	// Choice is an option kind (allow_once, allow_always, reject_once,
	// reject_always), "allow" or "deny", or an option id.
	Choice string `json:"choice"`
}

// AnswerResult is the answer of a permission answer.
type AnswerResult struct {
	Session string `json:"session"`
	Request string `json:"request"`
	Choice  string `json:"choice"`
}

// RestoreRequest is the body of POST /v1/sessions/{id}/restore.
type RestoreRequest struct {
	// Turn is the number of the turn (within the session) whose
	// checkpoint to restore; required.
	Turn int64 `json:"turn"`
	// After selects the state the turn left, instead of the one before it.
	After bool `json:"after,omitempty"`
}

// RestoreResult is the answer of a restore.
type RestoreResult struct {
	Session string `json:"session"`
	Turn    int64  `json:"turn"`
	After   bool   `json:"after"`
}

// Health is the answer of GET /v1/health. The counts are given only to an
// authenticated caller.
type Health struct {
	Status   string `json:"status"`
	Version  string `json:"version"`
	Sessions *int   `json:"sessions,omitempty"`
	Backends *int   `json:"backends,omitempty"`
	// Confinement says how the kernel confines agents on this machine
	// (cgroup or subreaper containment, the Landlock ABI, and warnings
	// when a protection is missing).
	Confinement any `json:"confinement,omitempty"`
}

// PoolStatus is the answer of GET /v1/pool.
type PoolStatus struct {
	Backends []pool.AgentStatus `json:"backends"`
	Stats    pool.Stats         `json:"stats"`
	// Spares are the spare sessions kept ready, when the daemon keeps any.
	Spares []pool.SpareStatus `json:"spares,omitempty"`
	// WriteQueues are the sessions with events in the store's write
	// queue, or whose agent was held waiting for room there lately.
	WriteQueues []pool.WriteQueue `json:"write_queues,omitempty"`
}

// spareLister is what a Pool may also be: one that keeps spares.
type spareLister interface {
	Spares() []pool.SpareStatus
}

// permissions: GET /v1/sessions/{id}/permissions → the pending requests.
func (s *Server) permissions(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := s.pool.Get(r.Context(), id); err != nil {
		return err
	}
	list := s.pool.Pending(id)
	if list == nil {
		list = []permission.Pending{}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// allPermissions: GET /v1/permissions, the requests of every session of
// this host that wait for a person, oldest first.
func (s *Server) allPermissions(w http.ResponseWriter, r *http.Request) error {
	list := s.pool.Pending("")
	if list == nil {
		list = []permission.Pending{}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// answer: POST /v1/sessions/{id}/permissions/{request} {"choice": kind}.
func (s *Server) answer(w http.ResponseWriter, r *http.Request) error {
	var req AnswerRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if strings.TrimSpace(req.Choice) == "" {
		return badRequest("choice", "field \"choice\" is required: allow_once, allow_always, reject_once, reject_always, allow or deny")
	}
	id, reqID := r.PathValue("id"), r.PathValue("request")
	if err := s.pool.Answer(id, reqID, req.Choice); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, AnswerResult{Session: id, Request: reqID, Choice: req.Choice})
	return nil
}

// diff: GET /v1/sessions/{id}/diff?turn=N&format=json|patch. Turn 0 (or
// none) is the whole session against its base commit.
func (s *Server) diff(w http.ResponseWriter, r *http.Request) error {
	turn, err := intParam(r, "turn")
	if err != nil {
		return err
	}
	format := r.URL.Query().Get("format")
	if format != "" && format != "json" && format != "patch" {
		return badRequest("format", "parameter \"format\" must be json or patch, not %q", format)
	}
	d, err := s.pool.Diff(r.Context(), r.PathValue("id"), turn)
	if err != nil {
		return err
	}
	if format == "patch" {
		w.Header().Set("Content-Type", "text/x-diff; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(d.Patch))
		return nil
	}
	if d.Files == nil {
		d.Files = []pool.FileChange{}
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// restore: POST /v1/sessions/{id}/restore {turn, after?}.
func (s *Server) restore(w http.ResponseWriter, r *http.Request) error {
	var req RestoreRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if req.Turn <= 0 {
		return badRequest("turn", "field \"turn\" is required: a turn number (1 for the session's first turn)")
	}
	id := r.PathValue("id")
	if err := s.pool.Restore(r.Context(), id, req.Turn, req.After); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, RestoreResult{Session: id, Turn: req.Turn, After: req.After})
	return nil
}

// poolStatus: GET /v1/pool → every backend and the counters.
func (s *Server) poolStatus(w http.ResponseWriter, r *http.Request) error {
	b := s.pool.Backends()
	if b == nil {
		b = []pool.AgentStatus{}
	}
	st := PoolStatus{Backends: b, Stats: s.pool.Stats()}
	if sl, ok := s.pool.(spareLister); ok {
		st.Spares = sl.Spares()
	}
	st.WriteQueues = s.writeQueues()
	writeJSON(w, http.StatusOK, st)
	return nil
}

// health: GET /v1/health, open to all (for liveness checks); the counts
// need the token.
func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	h := Health{Status: "ok", Version: s.cfg.Version, Confinement: s.cfg.Confinement}
	if s.authorized(r) {
		st := s.pool.Stats()
		n := 0
		for _, states := range st.Warm {
			for _, c := range states {
				n += c
			}
		}
		h.Sessions, h.Backends = &st.Sessions, &n
	}
	writeJSON(w, http.StatusOK, h)
	return nil
}
