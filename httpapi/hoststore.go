package httpapi

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// CodeStoreUnavailable (503, with Retry-After): the daemon could not
// reach its store (a PostgreSQL server restarting, a link down); nothing
// was done, and the request may be sent again.
const CodeStoreUnavailable = "store_unavailable"

// retryAfterStore is the Retry-After of CodeStoreUnavailable.
const retryAfterStore = 2 * time.Second

// storeUnavailable returns the answer to an error that says the store
// could not be reached: a connection refused, reset or cut, or a server
// that is shutting down, starting, or lost the connection (SQLSTATE class
// 08, 57P01–57P03). Nil for any other error.
func storeUnavailable(err error) *Error {
	if !unreachable(err) {
		return nil
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeStoreUnavailable, RetryAfter: retryAfterStore,
		Message: "the daemon's database cannot be reached right now (" + err.Error() + "); nothing was done: send the request again"}
}

// unreachable says whether err is a failure to reach the store.
func unreachable(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		c := st.SQLState()
		return strings.HasPrefix(c, "08") || c == "57P01" || c == "57P02" || c == "57P03"
	}
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE)
}
