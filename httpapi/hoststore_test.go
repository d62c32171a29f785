package httpapi

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"
)

type sqlStateErr string

func (e sqlStateErr) Error() string    { return "server says " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

// TestStoreUnavailableIs503: an error that says the store could not be
// reached answers 503 store_unavailable with a Retry-After; a database's
// other errors stay 500.
func TestStoreUnavailableIs503(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, err := range []error{
		fmt.Errorf("start turn: %w", sqlStateErr("57P01")),
		fmt.Errorf("start turn: %w", sqlStateErr("08006")),
		fmt.Errorf("get session: failed to connect: %w", dial),
	} {
		ae := errorFor(err)
		if ae.Status != http.StatusServiceUnavailable || ae.Code != CodeStoreUnavailable || ae.RetryAfter <= 0 {
			t.Errorf("errorFor(%v) = %d %s retry %v; want 503 store_unavailable with Retry-After", err, ae.Status, ae.Code, ae.RetryAfter)
		}
	}
	for _, err := range []error{fmt.Errorf("insert: %w", sqlStateErr("23505")), errors.New("boom")} {
		if ae := errorFor(err); ae.Status != http.StatusInternalServerError {
			t.Errorf("errorFor(%v) = %d; want 500", err, ae.Status)
		}
	}
}
