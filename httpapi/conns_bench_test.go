package httpapi

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
)

// nopConn is a net.Conn whose Close does nothing; the guard only keys on
// it and closes it.
type nopConn struct{ net.Conn }

func (*nopConn) Close() error { return nil }

// BenchmarkConnGuardAdmit measures admitting a connection past a full
// unproven cap (DefaultMaxUnproven), which closes another: the guard's
// cost on the accept loop during a flood.
func BenchmarkConnGuardAdmit(b *testing.B) {
	g := newConnGuard(ConnLimits{}.withDefaults(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	for i := range DefaultMaxUnproven {
		c := &nopConn{}
		g.connState(c, http.StateNew)
		if i%2 == 0 {
			g.connState(c, http.StateIdle)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := &nopConn{}
		g.connState(c, http.StateNew)
		if i%2 == 0 {
			g.connState(c, http.StateIdle)
		}
	}
}
