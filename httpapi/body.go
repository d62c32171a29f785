package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// errBodyTimeout answers a request whose body did not arrive in time.
var errBodyTimeout = &Error{Status: http.StatusRequestTimeout, Code: CodeRequestTimeout,
	Message: "the request body did not arrive in time"}

// hasBody says whether r declares a body (a length or chunks).
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody
}

// guardBody prepares a request that declares a body, before anything
// reads it: the body must arrive within BodyTimeout, and the answer closes
// the connection unless bufferBody reads the body (a request refused
// unread, e.g. without a credential, is answered at once instead of after
// the server drained a body that may trickle in). The returned func, run
// when the request is over, ends any read of a body left unread.
func (s *Server) guardBody(w http.ResponseWriter, r *http.Request) func() {
	if !hasBody(r) {
		return func() {}
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.Conns.BodyTimeout))
	w.Header().Set("Connection", "close")
	return func() {
		if w.Header().Get("Connection") == "close" {
			// The connection closes after this answer: what is left of
			// the body is not worth waiting for.
			_ = rc.SetReadDeadline(time.Now())
		}
	}
}

// bufferBody reads r's whole body (at most MaxBody bytes) into memory
// within the deadline guardBody set, then lifts the deadline, so that a
// handler that waits long (prompt?wait=true) or streams never finds its
// connection closed under it. A body over the limit is a 413, one that
// does not arrive in time a 408; both close the connection. A body read
// already (to check a host's signature of it) is not read again.
func (s *Server) bufferBody(w http.ResponseWriter, r *http.Request) error {
	if _, done := r.Body.(*bufferedBody); done || !hasBody(r) {
		return nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
				Message: fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
		case errors.As(err, &ne) && ne.Timeout():
			return errBodyTimeout
		}
		return badRequest("", "read request body: %v", err)
	}
	if err := http.NewResponseController(w).SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("lift the body's read deadline: %w", err)
	}
	w.Header().Del("Connection")
	r.Body = newBufferedBody(b)
	return nil
}
