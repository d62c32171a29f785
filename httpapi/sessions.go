package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// PromptRequest is the body of POST /v1/sessions/{id}/prompt.
type PromptRequest struct {
	// Agent selects the agent; "" means the session's active agent.
	Agent string `json:"agent,omitempty"`
	// Text is the user's message; required.
	Text string `json:"text"`
}

// CreateSessionRequest is the body of POST /v1/sessions: the session,
// and optionally its first prompt.
type CreateSessionRequest struct {
	pool.CreateRequest
	// Host, when set, is the id of the host (GET /v1/hosts) to run the
	// session on; it must be alive and have the agent. "" lets the
	// cluster place it (see Cluster.Place).
	Host string `json:"host,omitempty"`
	// Prompt, when set, starts the session's first turn with the
	// session's agent in the same call, as POST …/prompt would: one round
	// trip from nothing to a working agent (with a spare, its first token
	// comes about as soon as a warm session's would).
	Prompt string `json:"prompt,omitempty"`
}

// CreatedSession is the answer of POST /v1/sessions: the session, and
// with a prompt its first turn, or why that turn did not start (the
// session is made all the same).
type CreatedSession struct {
	pool.Session
	FirstTurn      *pool.Turn `json:"first_turn,omitempty"`
	FirstTurnError *Error     `json:"first_turn_error,omitempty"`
}

// CancelResult is the answer of POST /v1/sessions/{id}/cancel.
type CancelResult struct {
	Session   string `json:"session"`
	Cancelled bool   `json:"cancelled"`
}

// createSession: POST /v1/sessions {id?, repo, base_ref?, agent, title?,
// warm?, mcp_servers?, host?} → 201. In a cluster the session is made on
// the host Place picks, the create forwarded there if it is another; the
// answer's "host" names it. The agent starts in the background once the session exists
// unless warm is false (see pool.Pool.Create); its start, or why it was
// skipped (agent.warm_skipped), is on the session's stream. Asked for
// with Accept: text/event-stream, the answer is that stream itself: a
// create.result event carrying the answer, then the session's events
// from its first, as GET …/events gives them, in the one request.
func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req CreateSessionRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if strings.TrimSpace(req.Repo) == "" {
		return badRequest("repo", "field \"repo\" is required: the path or URL of a git repository")
	}
	if strings.TrimSpace(req.Agent) == "" {
		// Left out: the providers file's "default_agent", else demo (the
		// host that places it decides, and a forward names it).
		req.Agent = s.defaultAgent()
		if b, err := json.Marshal(req); err == nil {
			body = b
		}
	}
	if err := req.MCPServers.Validate("mcp_servers"); err != nil {
		return badRequest("mcp_servers", "%v", err)
	}
	if req.Handoff != nil {
		if err := checkHandoff(*req.Handoff); err != nil {
			return err
		}
	}
	if req.Prompt != "" && strings.TrimSpace(req.Prompt) == "" {
		return badRequest("prompt", "field \"prompt\" must not be blank: leave it out to create the session without a first turn")
	}
	if host, self, err := s.place(r, req); err != nil || !self {
		if err != nil {
			return err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		return s.forward(w, r, "", host)
	}
	var sess pool.Session
	var first pool.Turn
	var firstErr error
	if req.Prompt != "" {
		// One call: a session adopted from a spare stores its first
		// turn with itself.
		sess, first, firstErr, err = s.pool.CreatePrompt(r.Context(), req.CreateRequest, req.Prompt)
	} else {
		sess, err = s.pool.Create(r.Context(), req.CreateRequest)
	}
	if err != nil {
		return err
	}
	if sess.Host == "" {
		sess.Host = s.selfHost()
	}
	out := CreatedSession{Session: sess}
	if req.Prompt != "" {
		if firstErr != nil {
			// The session exists: say so with its id, and why its first
			// turn did not start (a budget, say), rather than fail the
			// call.
			out.FirstTurnError = errorFor(firstErr)
		} else {
			out.FirstTurn = &first
			out.Busy, out.Turn = true, first.ID
		}
	}
	if wantsEventStream(r) {
		// The stream starts at the session's first event: the first
		// turn's events, stored or to come, are all in it.
		ctx, cancel := s.longContext(r)
		defer cancel()
		if sub, err := s.pool.Subscribe(ctx, sess.ID, 0); err == nil {
			defer sub.Close()
			w.Header().Set("Location", "/v1/sessions/"+sess.ID)
			sw, done, err := s.startStreamStatus(w, http.StatusCreated)
			if done == nil {
				// Refused before the headers (shutting down): the session
				// exists all the same, so say so.
				writeJSON(w, http.StatusCreated, out)
				return nil
			}
			defer done()
			if err != nil {
				return err
			}
			sw.event(backends.Event{Session: sess.ID, Time: time.Now(), Type: EventCreateResult, Data: backends.MustJSON(out)}, false)
			s.followStream(ctx, sw, sub, 0)
			return nil
		}
		// The session is made: answer as JSON, the client follows its
		// stream with another request.
	}
	w.Header().Set("Location", "/v1/sessions/"+sess.ID)
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// wantsEventStream reports whether the client asks for the answer as a
// server-sent event stream.
func wantsEventStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// listSessions: GET /v1/sessions?status=open|closed. Without status,
// every session, closed ones included (as before the filter existed).
func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	status := r.URL.Query().Get("status")
	if status != "" && status != pool.StatusOpen && status != pool.StatusClosed {
		return badRequest("status", "parameter \"status\" must be open or closed, not %q", status)
	}
	all, err := s.pool.List(r.Context())
	if err != nil {
		return err
	}
	list := make([]pool.Session, 0, len(all))
	for _, sess := range all {
		if status == "" || sess.Status == status {
			list = append(list, sess)
		}
	}
	if err := s.withPR(r.Context(), list); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// getSession: GET /v1/sessions/{id}.
func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.pool.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	one := []pool.Session{sess}
	if err := s.withPR(r.Context(), one); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, one[0])
	return nil
}

// closeSession: DELETE /v1/sessions/{id}?discard=bool. Work is committed
// to the session's branch unless discard is true.
func (s *Server) closeSession(w http.ResponseWriter, r *http.Request) error {
	discard, err := boolParam(r, "discard")
	if err != nil {
		return err
	}
	res, err := s.pool.Close(r.Context(), r.PathValue("id"), discard)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// prompt: POST /v1/sessions/{id}/prompt {agent?, text} → 202 with the
// started turn, whose queue_position is set when it waits for a backend
// slot; with ?wait=true, 200 with the finished turn. With an
// Idempotency-Key header, a prompt whose key already started a turn of
// the session answers that turn and starts nothing.
func (s *Server) prompt(w http.ResponseWriter, r *http.Request) error {
	wait, err := boolParam(r, "wait")
	if err != nil {
		return err
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var req PromptRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if strings.TrimSpace(req.Text) == "" {
		return badRequest("text", "field \"text\" is required and must not be blank")
	}
	id := r.PathValue("id")
	t, err := s.pool.StartPrompt(r.Context(), pool.PromptRequest{Session: id, Agent: req.Agent, Text: req.Text, Key: key})
	if err != nil {
		return err
	}
	if !wait {
		w.Header().Set("Location", "/v1/sessions/"+id+"/turns/"+seqString(t.ID))
		writeJSON(w, http.StatusAccepted, t)
		return nil
	}
	// A turn a prompt started has no review: reviews belong to the turns
	// the review endpoint starts.
	return s.waitTurn(w, r, id, t.ID, false)
}

// IdempotencyKeyHeader carries the key a client chose for a prompt: the
// same prompt sent again with it (the client did not learn whether the
// first arrived) gets the turn the first started.
const IdempotencyKeyHeader = "Idempotency-Key"

// maxIdempotencyKey bounds the key's length.
const maxIdempotencyKey = 200

// idempotencyKey reads the request's Idempotency-Key: "" when absent,
// else 1 to 200 visible ASCII characters.
func idempotencyKey(r *http.Request) (string, error) {
	vals := r.Header.Values(IdempotencyKeyHeader)
	if len(vals) == 0 {
		return "", nil
	}
	k := vals[0]
	if len(vals) > 1 || k == "" || len(k) > maxIdempotencyKey || strings.IndexFunc(k, func(c rune) bool { return c < 0x21 || c > 0x7e }) >= 0 {
		return "", badRequest(IdempotencyKeyHeader, "header %s must be one value of 1 to %d visible ASCII characters", IdempotencyKeyHeader, maxIdempotencyKey)
	}
	return k, nil
}

// waitTurn answers with the turn once it has ended, with its review
// (judged) when reviews is set.
func (s *Server) waitTurn(w http.ResponseWriter, r *http.Request, id string, turn int64, reviews bool) error {
	ctx, cancel := s.longContext(r)
	defer cancel()
	t, err := s.pool.WaitTurn(ctx, id, turn)
	if err != nil {
		return s.shutdownErr(err)
	}
	if !reviews {
		writeJSON(w, http.StatusOK, t)
		return nil
	}
	one := []pool.Turn{t}
	if err := s.withReviews(ctx, id, one); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, one[0])
	return nil
}

// cancelTurn: POST /v1/sessions/{id}/cancel ends the running turn and
// answers once it has ended.
func (s *Server) cancelTurn(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := s.pool.Cancel(r.Context(), id); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, CancelResult{Session: id, Cancelled: true})
	return nil
}

// retry: POST /v1/sessions/{id}/retry → 202 with the new turn.
func (s *Server) retry(w http.ResponseWriter, r *http.Request) error {
	t, err := s.pool.Retry(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, t)
	return nil
}

// turns: GET /v1/sessions/{id}/turns.
func (s *Server) turns(w http.ResponseWriter, r *http.Request) error {
	list, err := s.pool.Turns(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if list == nil {
		list = []pool.Turn{}
	}
	if err := s.withReviews(r.Context(), r.PathValue("id"), list); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// turn: GET /v1/sessions/{id}/turns/{turn}?wait=bool; with wait, the
// answer comes when the turn has ended.
func (s *Server) turn(w http.ResponseWriter, r *http.Request) error {
	n, err := parseSeq("turn", r.PathValue("turn"))
	if err != nil {
		return err
	}
	wait, err := boolParam(r, "wait")
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if wait {
		return s.waitTurn(w, r, id, n, true)
	}
	list, err := s.pool.Turns(r.Context(), id)
	if err != nil {
		return err
	}
	for _, t := range list {
		if t.ID == n {
			one := []pool.Turn{t}
			if err := s.withReviews(r.Context(), id, one); err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, one[0])
			return nil
		}
	}
	return &Error{Status: http.StatusNotFound, Code: CodeNoTurn, Message: "session " + id + " has no turn " + seqString(n)}
}

// place picks the host of a new session: this one without a cluster (a
// "host" is then refused) or when another host forwarded the create here,
// else the one the cluster picks.
func (s *Server) place(r *http.Request, req CreateSessionRequest) (ClusterHost, bool, error) {
	if s.cfg.Cluster == nil {
		if req.Host != "" {
			return ClusterHost{}, false, errNoCluster(req.Host)
		}
		return ClusterHost{}, true, nil
	}
	if principalOf(r).host != "" {
		return ClusterHost{}, true, nil
	}
	h, self, err := s.cfg.Cluster.Place(r.Context(), req.Agent, req.Host)
	if err != nil {
		return ClusterHost{}, false, fmt.Errorf("place the session of %q on host %q: %w", req.Agent, req.Host, err)
	}
	return h, self, nil
}

// FallbackAgent is the agent of a session created without one when the
// providers file names no "default_agent".
const FallbackAgent = "demo"

// defaultAgent is the agent of a session created without one.
func (s *Server) defaultAgent() string {
	if s.cfg.Registry != nil {
		if a := s.cfg.Registry.Snapshot().DefaultAgent; a != "" {
			return a
		}
	}
	return FallbackAgent
}
