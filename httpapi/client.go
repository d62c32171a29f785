package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
)

// maxAnswer bounds the size of an answer the Client reads.
const maxAnswer = 64 << 20

// patchRetries is how often SetProviderEnabled retries on a stale ETag.
const patchRetries = 3

// Client calls the API. Its zero HTTP means http.DefaultClient (which has
// no timeout: bound calls with their ctx). Failed calls return an *Error
// carrying the API's code, or a transport error.
type Client struct {
	// BaseURL is the daemon's root, e.g. "http://127.0.0.1:7070".
	BaseURL string
	// Token is the bearer token.
	Token string
	// HTTP is the client used. By default, with a token and a plain-http
	// BaseURL, each connection is used only after the daemon proved it
	// knows the token (see ErrUnproven); otherwise http.DefaultClient.
	HTTP *http.Client
	// ReconnectDelay is the pause before Events reconnects (default
	// DefaultReconnectDelay).
	ReconnectDelay time.Duration
}

// httpClient is c.HTTP, or by default: for a plain-http daemon and a
// token, a client whose connections are used only once the daemon proved
// it knows the token (hello.go); else http.DefaultClient.
func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	if c.Token != "" && len(c.BaseURL) > 7 && strings.EqualFold(c.BaseURL[:7], "http://") {
		return provingClient(c.BaseURL, c.Token)
	}
	return http.DefaultClient
}

// request builds a request to path (with query) with a JSON body, if any.
func (c *Client) request(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		if raw, ok := body.(json.RawMessage); ok {
			rd = bytes.NewReader(raw)
		} else {
			b, err := json.Marshal(body)
			if err != nil {
				return nil, fmt.Errorf("encode %s %s: %w", method, path, err)
			}
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return req, nil
}

// do sends req and decodes a 2xx answer into out (unless nil); any other
// status becomes an *Error.
func (c *Client) do(req *http.Request, out any) (http.Header, error) {
	resp, err := c.httpClient().Do(req)
	// A daemon under a flood of connections closes new ones it cannot
	// tell from the flood before their request is read (see conns.go): a
	// request that cannot have changed anything is sent again.
	for try := 1; err != nil && try <= resetRetries && retryable(req, err); try++ {
		select {
		case <-time.After(time.Duration(try) * 100 * time.Millisecond):
		case <-req.Context().Done():
		}
		resp, err = c.httpClient().Do(req)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.Header, readError(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
		return resp.Header, nil
	}
	if s, ok := out.(*string); ok {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		*s = string(b)
		return resp.Header, err
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(out); err != nil {
		return resp.Header, fmt.Errorf("%s %s: decode answer: %w", req.Method, req.URL.Path, err)
	}
	return resp.Header, nil
}

// resetRetries is how many times a GET whose connection was reset is sent
// again.
const resetRetries = 3

// retryable reports whether req failed on a reset or closed connection
// (a reset read, an end of stream, or a write to a connection the server
// had closed: a broken pipe) and, being a GET without a body, can be sent
// again.
func retryable(req *http.Request, err error) bool {
	if req.Method != http.MethodGet || req.Body != nil && req.Body != http.NoBody || req.Context().Err() != nil {
		return false
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// readError turns a failed answer into an *Error.
func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb errorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error == nil {
		eb.Error = &Error{Code: codeOfStatus(resp.StatusCode), Message: strings.TrimSpace(string(b))}
		if eb.Error.Message == "" {
			eb.Error.Message = http.StatusText(resp.StatusCode)
		}
	}
	eb.Error.Status = resp.StatusCode
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		eb.Error.RetryAfter = time.Duration(s) * time.Second
	}
	return eb.Error
}

// codeOfStatus guesses a code for an answer without an error body.
func codeOfStatus(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	}
	if status >= 500 {
		return CodeInternal
	}
	return CodeBadRequest
}

// call is request + do. A request refused session_moved (it reached a
// host that no longer owns the session, which did nothing with it) is
// sent once more, and so reaches the new owner.
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	var err error
	for try := 0; try < 2; try++ {
		var req *http.Request
		if req, err = c.request(ctx, method, path, body); err != nil {
			return err
		}
		if _, err = c.do(req, out); !IsCode(err, CodeSessionMoved) {
			return err
		}
	}
	return err
}

// IsCode reports whether err is an API error with the given code.
func IsCode(err error, code string) bool {
	var ae *Error
	return errors.As(err, &ae) && ae.Code == code
}

func sessionPath(id string, rest ...string) string {
	p := "/v1/sessions/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Health returns GET /v1/health.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.call(ctx, http.MethodGet, "/v1/health", nil, &h)
}

// Providers returns the registry snapshot; its ETag is the file's.
func (c *Client) Providers(ctx context.Context) (registry.Snapshot, error) {
	var s registry.Snapshot
	return s, c.call(ctx, http.MethodGet, "/v1/providers", nil, &s)
}

// ProviderList returns the registry snapshot with the machine's
// confinement (GET /v1/providers).
func (c *Client) ProviderList(ctx context.Context) (ProviderList, error) {
	var l ProviderList
	return l, c.call(ctx, http.MethodGet, "/v1/providers", nil, &l)
}

// PatchProvider sends a JSON Merge Patch of provider id's entry, guarded
// RemoveProvider deletes custom provider id from the providers file
// (DELETE /v1/providers/{id}); a built-in is refused (409 built_in).
func (c *Client) RemoveProvider(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/providers/"+url.PathEscape(id), nil, nil)
}

// by ifMatch ("" for none).
func (c *Client) PatchProvider(ctx context.Context, id string, patch json.RawMessage, ifMatch string) (PatchResult, error) {
	req, err := c.request(ctx, http.MethodPatch, "/v1/providers/"+url.PathEscape(id), patch)
	if err != nil {
		return PatchResult{}, err
	}
	req.Header.Set("Content-Type", mergePatchType)
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	var res PatchResult
	_, err = c.do(req, &res)
	return res, err
}

// SetProviderEnabled flips provider id's "enabled" through a merge patch
// guarded by the current ETag. When the file was changed by hand meanwhile
// (412), it has the daemon read the file again and retries: only that
// field of the file changes, and no hand edit is overwritten.
func (c *Client) SetProviderEnabled(ctx context.Context, id string, enabled bool) (PatchResult, error) {
	patch := json.RawMessage(`{"enabled": ` + strconv.FormatBool(enabled) + `}`)
	var err error
	for range patchRetries {
		var snap registry.Snapshot
		if snap, err = c.Providers(ctx); err != nil {
			return PatchResult{}, err
		}
		var res PatchResult
		res, err = c.PatchProvider(ctx, id, patch, snap.ETag)
		if !IsCode(err, CodePreconditionFailed) {
			return res, err
		}
		// The registry has not seen the edit yet: read it now. A file it
		// rejects still gets its ETag read, and the patch then says why.
		if _, rerr := c.RefreshProviders(ctx); rerr != nil && !IsCode(rerr, CodeInvalidConfig) {
			return PatchResult{}, rerr
		}
	}
	return PatchResult{}, err
}

// RefreshProviders reloads the providers file and looks commands up again;
// it answers as ProviderList does.
func (c *Client) RefreshProviders(ctx context.Context) (ProviderList, error) {
	var l ProviderList
	return l, c.call(ctx, http.MethodPost, "/v1/providers/refresh", nil, &l)
}

// ProbeProvider starts provider id's agent, asks what it offers, stops it.
func (c *Client) ProbeProvider(ctx context.Context, id string) (registry.ProbeInfo, error) {
	var p registry.ProbeInfo
	return p, c.call(ctx, http.MethodPost, "/v1/providers/"+url.PathEscape(id)+"/probe", nil, &p)
}

// AgentSessions lists provider's own sessions whose working directory is
// repo ("" for all of them).
func (c *Client) AgentSessions(ctx context.Context, provider, repo string) ([]backends.AgentSession, error) {
	var r agentSessionsResponse
	path := "/v1/providers/" + url.PathEscape(provider) + "/sessions"
	if repo != "" {
		path += "?repo=" + url.QueryEscape(repo)
	}
	return r.Sessions, c.call(ctx, http.MethodGet, path, nil, &r)
}

// LoginAgent asks provider's agent to log in with one of its "agent"
// login methods (method "" picks its only one), and returns the
// provider's status afterwards.
func (c *Client) LoginAgent(ctx context.Context, provider, method string) (registry.ProviderStatus, error) {
	var r loginResponse
	return r.Status, c.call(ctx, http.MethodPost, "/v1/providers/"+url.PathEscape(provider)+"/login", loginRequest{Method: method}, &r)
}

// CreateSession opens a session (and its worktree).
func (c *Client) CreateSession(ctx context.Context, req pool.CreateRequest) (pool.Session, error) {
	var s pool.Session
	return s, c.call(ctx, http.MethodPost, "/v1/sessions", req, &s)
}

// CreateSessionPrompt creates a session and starts its first turn with
// prompt in the same call (POST /v1/sessions with "prompt"). The session
// is made even when its first turn is refused: the answer's
// FirstTurnError then says why.
func (c *Client) CreateSessionPrompt(ctx context.Context, req pool.CreateRequest, prompt string) (CreatedSession, error) {
	var s CreatedSession
	return s, c.call(ctx, http.MethodPost, "/v1/sessions", CreateSessionRequest{CreateRequest: req, Prompt: prompt}, &s)
}

// Create creates a session as CreateSessionRequest says: on the host it
// names, if one, with a first prompt, if one. The answer's Host names the
// host the session runs on.
func (c *Client) Create(ctx context.Context, req CreateSessionRequest) (CreatedSession, error) {
	var s CreatedSession
	return s, c.call(ctx, http.MethodPost, "/v1/sessions", req, &s)
}

// Sessions lists the sessions.
func (c *Client) Sessions(ctx context.Context) ([]pool.Session, error) {
	var l []pool.Session
	return l, c.call(ctx, http.MethodGet, "/v1/sessions", nil, &l)
}

// Session returns one session.
func (c *Client) Session(ctx context.Context, id string) (pool.Session, error) {
	var s pool.Session
	return s, c.call(ctx, http.MethodGet, sessionPath(id), nil, &s)
}

// CloseSession closes a session; its work is committed to its branch
// unless discard.
func (c *Client) CloseSession(ctx context.Context, id string, discard bool) (pool.CloseResult, error) {
	var r pool.CloseResult
	return r, c.call(ctx, http.MethodDelete, sessionPath(id)+"?discard="+strconv.FormatBool(discard), nil, &r)
}

// Prompt starts a turn and returns it at once; with wait, it returns the
// turn once it has ended.
//
// The prompt carries a key of its own (Idempotency-Key), so that it can be
// sent again when the client cannot know whether it arrived: the
// connection broke before the answer, or the session was moving between
// hosts. The daemon answers a prompt sent again with the turn the first
// started, so a turn is never started twice.
func (c *Client) Prompt(ctx context.Context, session, agent, text string, wait bool) (pool.Turn, error) {
	p := sessionPath(session, "prompt")
	if wait {
		p += "?wait=true"
	}
	key := rand.Text()
	var err error
	for try := 0; ; try++ {
		var t pool.Turn
		var req *http.Request
		if req, err = c.request(ctx, http.MethodPost, p, PromptRequest{Agent: agent, Text: text}); err != nil {
			return t, err
		}
		req.Header.Set(IdempotencyKeyHeader, key)
		if _, err = c.do(req, &t); err == nil || try >= promptResends || !resendPrompt(err) || ctx.Err() != nil {
			return t, err
		}
		pause := time.Duration(try+1) * 200 * time.Millisecond
		var ae *Error
		if errors.As(err, &ae) && ae.RetryAfter > 0 {
			pause = min(ae.RetryAfter, 2*time.Second)
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return t, err
		}
	}
}

// promptResends is how many times Prompt sends a prompt again.
const promptResends = 3

// resendPrompt reports whether a prompt that failed with err may have
// arrived, or can arrive if sent again: its connection broke before the
// answer, or the session was moving between hosts
// (session_moved, session_moving), its host did not answer the host
// that forwarded it (host_unreachable), or the database was out of reach
// (store_unavailable).
func resendPrompt(err error) bool {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.Code == CodeSessionMoved || ae.Code == CodeSessionMoving || ae.Code == CodeHostUnreachable || ae.Code == CodeStoreUnavailable
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		// A kept-alive connection the daemon closed as the prompt went
		// out (net/http's errServerClosedIdle, which it does not export;
		// it sends a request with a key again itself, but only once, on
		// another kept connection the daemon may have closed too: a
		// daemon under a connection flood closes many).
		strings.Contains(err.Error(), "http: server closed idle connection")
}

// CommitWork commits the session's uncommitted work to its branch, with
// the daemon's hardened git (POST /v1/sessions/{id}/commit).
func (c *Client) CommitWork(ctx context.Context, session string) (pool.CommitResult, error) {
	var r pool.CommitResult
	return r, c.call(ctx, http.MethodPost, sessionPath(session, "commit"), nil, &r)
}

// Cancel ends the session's running turn; it returns once it has ended.
func (c *Client) Cancel(ctx context.Context, session string) error {
	return c.call(ctx, http.MethodPost, sessionPath(session, "cancel"), nil, nil)
}

// Retry starts a new turn with the session's last prompt.
func (c *Client) Retry(ctx context.Context, session string) (pool.Turn, error) {
	var t pool.Turn
	return t, c.call(ctx, http.MethodPost, sessionPath(session, "retry"), nil, &t)
}

// Turns lists the session's turns, oldest first.
func (c *Client) Turns(ctx context.Context, session string) ([]pool.Turn, error) {
	var l []pool.Turn
	return l, c.call(ctx, http.MethodGet, sessionPath(session, "turns"), nil, &l)
}

// Turn returns one turn; with wait, once it has ended.
func (c *Client) Turn(ctx context.Context, session string, turn int64, wait bool) (pool.Turn, error) {
	var t pool.Turn
	return t, c.call(ctx, http.MethodGet, sessionPath(session, "turns", strconv.FormatInt(turn, 10))+"?wait="+strconv.FormatBool(wait), nil, &t)
}

// Permissions lists the session's pending permission requests.
func (c *Client) Permissions(ctx context.Context, session string) ([]permission.Pending, error) {
	var l []permission.Pending
	return l, c.call(ctx, http.MethodGet, sessionPath(session, "permissions"), nil, &l)
}

// AllPermissions lists the pending permission requests of every session,
// oldest first.
func (c *Client) AllPermissions(ctx context.Context) ([]permission.Pending, error) {
	var l []permission.Pending
	return l, c.call(ctx, http.MethodGet, "/v1/permissions", nil, &l)
}

// Answer answers a pending permission request: choice is an option kind,
// "allow" or "deny".
func (c *Client) Answer(ctx context.Context, session, request, choice string) error {
	return c.call(ctx, http.MethodPost, sessionPath(session, "permissions", url.PathEscape(request)), AnswerRequest{Choice: choice}, nil)
}

// Diff returns the changes of a turn, or of the whole session for turn 0.
func (c *Client) Diff(ctx context.Context, session string, turn int64) (pool.Diff, error) {
	var d pool.Diff
	return d, c.call(ctx, http.MethodGet, sessionPath(session, "diff")+"?turn="+strconv.FormatInt(turn, 10), nil, &d)
}

// Restore puts the worktree back to a turn's checkpoint (before it, or
// with after the state it left).
func (c *Client) Restore(ctx context.Context, session string, turn int64, after bool) error {
	return c.call(ctx, http.MethodPost, sessionPath(session, "restore"), RestoreRequest{Turn: turn, After: after}, nil)
}

// Pool returns every backend of the pool and its counters.
func (c *Client) Pool(ctx context.Context) (PoolStatus, error) {
	var p PoolStatus
	return p, c.call(ctx, http.MethodGet, "/v1/pool", nil, &p)
}
