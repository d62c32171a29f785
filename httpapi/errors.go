package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
)

// Error codes, the "code" of an error body.
const (
	CodeBadRequest         = "bad_request"            // 400: malformed input; Field names it
	CodeInvalidChoice      = "invalid_choice"         // 400: no offered permission option matches
	CodeUnauthorized       = "unauthorized"           // 401: missing or wrong bearer token
	CodeBudgetExceeded     = "budget_exceeded"        // 402: a session's or provider's budget is used up; Budget has the figures
	CodeForbiddenHost      = "forbidden_host"         // 403: Host header not allowed
	CodeNotFound           = "not_found"              // 404: no such session, route or record
	CodeNoTurn             = "no_turn"                // 404: no such turn, or none running
	CodeUnknownProvider    = "unknown_provider"       // 404
	CodeUnknownRequest     = "unknown_request"        // 404: no such pending permission request
	CodeMethodNotAllowed   = "method_not_allowed"     // 405
	CodeBusy               = "busy"                   // 409: the session is running a turn
	CodeClosed             = "closed"                 // 409: the session is closed
	CodeAgentFailing       = "agent_failing"          // 409: the agent crashed too often
	CodeProviderDisabled   = "provider_disabled"      // 409
	CodeNotInstalled       = "provider_not_installed" // 409
	CodeUnsupported        = "unsupported"            // 409: not possible with this agent or setup
	CodeNeedsAuth          = "needs_auth"             // 409: the agent needs the user to log in (agentpool login)
	CodeRequestTimeout     = "request_timeout"        // 408: the request body did not arrive in time
	CodePreconditionFailed = "precondition_failed"    // 412: stale If-Match
	CodeTooLarge           = "too_large"              // 413: request body over the limit
	CodeUnsupportedMedia   = "unsupported_media_type" // 415
	CodeInvalidConfig      = "invalid_config"         // 422: the config (or patch) is invalid
	CodeClientGone         = "client_closed"          // 499: the client went away (never seen by it)
	CodeInternal           = "internal"               // 500
	CodeProbeFailed        = "probe_failed"           // 502: the agent failed its probe
	CodeAtCapacity         = "at_capacity"            // 503, with Retry-After
	CodeShuttingDown       = "shutting_down"          // 503
	CodeTimeout            = "timeout"                // 504
	CodeStorageFull        = "storage_full"           // 507: the disk holding the data or the repository is full
)

// statusClientClosed is the (nginx) status of a request whose client went
// away; nobody receives it, but it is counted in metrics.
const statusClientClosed = 499

// retryAfterCapacity is the Retry-After given with an at_capacity answer.
const retryAfterCapacity = 5 * time.Second

// Error is an API error: the body {"error": {...}} of every failed request,
// and what the Client returns for one (test it with errors.As).
type Error struct {
	// Status is the HTTP status; it is not part of the JSON body.
	Status int `json:"-"`
	// Code is one of the Code constants.
	Code string `json:"code"`
	// Message says what went wrong, for people.
	Message string `json:"message"`
	// Field names the offending request field or parameter, if one.
	Field string `json:"field,omitempty"`
	// Diagnostics are the problems of an invalid config or patch.
	Diagnostics []Diagnostic `json:"diagnostics,omitempty"`
	// Budget is the budget that refused a prompt (budget_exceeded).
	Budget *pool.BudgetExceeded `json:"budget,omitempty"`
	// RetryAfter is the server's Retry-After, if any.
	RetryAfter time.Duration `json:"-"`
}

// Diagnostic is one problem of a providers document, as the registry
// reports it (see registry.ValidationError).
type Diagnostic struct {
	File    string `json:"file,omitempty"`
	Path    string `json:"path,omitempty"`
	Line    int    `json:"line,omitempty"`
	Col     int    `json:"col,omitempty"`
	Message string `json:"message"`
}

// Error returns "code: message" (with the status when known).
func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s (%d %s): %s", e.Code, e.Status, http.StatusText(e.Status), e.Message)
	}
	return e.Code + ": " + e.Message
}

// errorBody is the JSON shape of an error answer.
type errorBody struct {
	Error *Error `json:"error"`
}

// badRequest returns a 400 naming field.
func badRequest(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Field: field, Message: fmt.Sprintf(format, args...)}
}

// userFacing is an error that carries the sentence a user should read:
// what is wrong and what to do, without the wrapping steps and the commands
// that found it. The API answers with it (the page shows it too); logs and
// errors.Is see the whole error.
type userFacing interface {
	UserMessage() string
}

// errorFor maps any error to the API error to answer with. It is the one
// place that decides statuses and codes.
func errorFor(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	if ce := clusterError(err); ce != nil {
		return ce
	}
	msg := err.Error()
	var uf userFacing
	if errors.As(err, &uf) {
		// The sentence the user reads; the wrapped chain (steps, git
		// commands, exit statuses) is the log's.
		msg = uf.UserMessage()
	}
	mk := func(status int, code string) *Error { return &Error{Status: status, Code: code, Message: msg} }
	var ve *registry.ValidationError
	switch {
	case errors.As(err, &ve):
		e := mk(http.StatusUnprocessableEntity, CodeInvalidConfig)
		e.Diagnostics = diagnosticsOf(err)
		return e
	case isStorageFull(err):
		e := mk(http.StatusInsufficientStorage, CodeStorageFull)
		e.Message = storageFullMessage(err, msg)
		return e
	case errors.Is(err, pool.ErrBudgetExceeded):
		e := mk(http.StatusPaymentRequired, CodeBudgetExceeded)
		var be *pool.BudgetError
		if errors.As(err, &be) {
			b := be.BudgetExceeded
			e.Budget = &b
		}
		return e
	case errors.Is(err, pool.ErrNoUsage):
		return mk(http.StatusNotImplemented, CodeNotImplemented)
	case errors.Is(err, pool.ErrAtCapacity):
		e := mk(http.StatusServiceUnavailable, CodeAtCapacity)
		e.RetryAfter = retryAfterCapacity
		return e
	case errors.Is(err, pool.ErrInvalid):
		return mk(http.StatusBadRequest, CodeBadRequest)
	case errors.Is(err, pool.ErrNoTurn):
		return mk(http.StatusNotFound, CodeNoTurn)
	case errors.Is(err, registry.ErrUnknown):
		return mk(http.StatusNotFound, CodeUnknownProvider)
	case errors.Is(err, pool.ErrNotFound):
		return mk(http.StatusNotFound, CodeNotFound)
	case errors.Is(err, permission.ErrUnknownRequest):
		return mk(http.StatusNotFound, CodeUnknownRequest)
	case errors.Is(err, permission.ErrInvalidChoice):
		e := mk(http.StatusBadRequest, CodeInvalidChoice)
		e.Field = "choice"
		return e
	case errors.Is(err, pool.ErrBusy):
		return mk(http.StatusConflict, CodeBusy)
	case errors.Is(err, backends.ErrAuthRequired):
		return mk(http.StatusConflict, CodeNeedsAuth)
	case errors.Is(err, pool.ErrAgentFailing):
		return mk(http.StatusConflict, CodeAgentFailing)
	case errors.Is(err, pool.ErrClosed):
		return mk(http.StatusConflict, CodeClosed)
	case errors.Is(err, pool.ErrNotAdvertised):
		return mk(http.StatusConflict, CodeNotAdvertised)
	case errors.Is(err, registry.ErrDisabled):
		return mk(http.StatusConflict, CodeProviderDisabled)
	case errors.Is(err, registry.ErrNotInstalled):
		return mk(http.StatusConflict, CodeNotInstalled)
	case errors.Is(err, registry.ErrConfig):
		return mk(http.StatusUnprocessableEntity, CodeInvalidConfig)
	case errors.Is(err, registry.ErrPreconditionFailed):
		return mk(http.StatusPreconditionFailed, CodePreconditionFailed)
	case errors.Is(err, registry.ErrNoFile), errors.Is(err, registry.ErrNoProber), errors.Is(err, backends.ErrUnsupported):
		return mk(http.StatusConflict, CodeUnsupported)
	case errors.Is(err, registry.ErrClosed):
		return mk(http.StatusServiceUnavailable, CodeShuttingDown)
	case errors.Is(err, context.Canceled):
		return mk(statusClientClosed, CodeClientGone)
	case errors.Is(err, context.DeadlineExceeded):
		return mk(http.StatusGatewayTimeout, CodeTimeout)
	}
	return mk(http.StatusInternalServerError, CodeInternal)
}

// diagnosticsOf lists every *registry.ValidationError joined in err.
func diagnosticsOf(err error) []Diagnostic {
	var out []Diagnostic
	var walk func(error)
	walk = func(err error) {
		if ve, ok := err.(*registry.ValidationError); ok {
			out = append(out, Diagnostic{File: ve.File, Path: ve.Path, Line: ve.Line, Col: ve.Col, Message: ve.Msg})
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			if e := u.Unwrap(); e != nil {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

// writeError answers with err's status and error body. Internal errors are
// logged; the others are the client's business.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae := errorFor(err)
	if ae.Status >= 500 && ae.Status != http.StatusServiceUnavailable {
		s.log.Error("request failed", logKeyMethod, r.Method, logKeyPath, r.URL.Path, logKeyErr, err)
	}
	if ae.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((ae.RetryAfter+time.Second-1)/time.Second)))
	}
	if ae.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentpool"`)
	}
	writeJSON(w, ae.Status, errorBody{Error: ae})
}
