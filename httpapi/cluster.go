package httpapi

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentpool/agentpool/pool"
	"net/http"
	"time"
)

// Several daemons ("hosts") may share one store. Each open session is
// owned by one of them; any host answers a request about a session by
// forwarding it to the owner (forward.go), and places a new session on
// the host best able to run it. The hosts prove themselves to each other
// with the cluster key, which never leaves them: they sign the requests
// they forward (hostauth.go) and check who is at the other end of a
// connection before they forward on it (hosthello.go).

// Cluster is what the server needs of the hosts that share the pool; a
// nil Cluster is one host alone, as without a shared store.
type Cluster interface {
	// Self is this host's id.
	Self() string
	// Owner returns the host that owns session, and self true when it is
	// this host. A session no host owns (closed, say) is self's to answer
	// from the shared store. It returns an error wrapping ErrSessionMoving
	// when the owner is dead and no host has taken the session over yet,
	// and one wrapping pool.ErrNotFound for an unknown session.
	Owner(ctx context.Context, session string) (h ClusterHost, self bool, err error)
	// Place picks the host for a new session of agent: want (a host id,
	// "" = any) if it is alive and has the agent, else the alive host with
	// the most free capacity that has it. It returns an error wrapping
	// ErrUnknownHost or ErrHostDown for a want it cannot use, ErrNoHost
	// when no alive host has the agent.
	Place(ctx context.Context, agent, want string) (h ClusterHost, self bool, err error)
	// Key is the cluster credential, from which the keys that sign
	// host-to-host requests and prove hosts are derived (it is read once,
	// by New, and never sent); "" refuses every request that claims to
	// come from a host.
	Key() string
	// KnownToken says whether a bearer token is the user token of a live
	// host of the cluster (compared by SHA-256, in constant time), so that
	// a user's token works on every host.
	KnownToken(token string) bool
}

// ClusterHost is a host of the cluster: its id and the URL the other
// hosts reach it at (see CheckAdvertiseURL).
type ClusterHost struct {
	ID        string
	Advertise string
}

// Headers of host-to-host requests. Whatever a client sends under these
// names is never passed on.
const (
	// HeaderClusterKey carried the cluster key itself in earlier
	// versions; hosts no longer send it, and a request bearing it is
	// refused 401.
	HeaderClusterKey = "X-Agentpool-Cluster-Key"
	// HeaderForwardedBy names the host that forwarded a request, which
	// signed it (HeaderSignature): a request bearing either is
	// authenticated by that signature alone (its user was, by the host
	// that forwards it), and refused 401 without a valid one. A forwarded
	// request is never forwarded again.
	HeaderForwardedBy = "X-Agentpool-Forwarded-By"
)

// Errors a Cluster returns (wrapped); the server maps them to statuses.
var (
	// ErrSessionMoving: the session's owner is dead and no host has taken
	// it over yet (503 session_moving, with Retry-After).
	ErrSessionMoving = errors.New("the session's host is gone and no host has taken it over yet")
	// ErrUnknownHost: a placement asked for a host the cluster does not
	// know (400 naming "host").
	ErrUnknownHost = errors.New("no such host")
	// ErrHostDown: a placement asked for a host that is not alive, or
	// lacks the agent (409 naming "host").
	ErrHostDown = errors.New("host is not alive or lacks the agent")
	// ErrNoHost: no alive host has the agent (409 no_host).
	ErrNoHost = errors.New("no alive host has the agent")
)

// Codes of the cluster's errors.
const (
	// CodeSessionMoved (409): the host a request was forwarded to no
	// longer owns the session; sending the request again reaches the new
	// owner (the Client does, once).
	CodeSessionMoved = "session_moved"
	// CodeSessionMoving (503, with Retry-After): the session's host is
	// gone and no host has taken it over yet.
	CodeSessionMoving = "session_moving"
	// CodeHostDown (409): the host asked for cannot take the session.
	CodeHostDown = "host_down"
	// CodeNoHost (409): no alive host has the agent.
	CodeNoHost = "no_host"
	// CodeHostUnreachable (503, with Retry-After): the host that owns the session did not
	// answer a forwarded request.
	CodeHostUnreachable = "host_unreachable"
)

// retryAfterMoving is the Retry-After of a session_moving answer: about
// one heartbeat, after which a host may have taken the session over.
const retryAfterMoving = 2 * time.Second

// clusterError maps the cluster's errors, or returns nil.
func clusterError(err error) *Error {
	mk := func(status int, code, field string) *Error {
		return &Error{Status: status, Code: code, Field: field, Message: err.Error()}
	}
	switch {
	case errors.Is(err, ErrSessionMoving):
		e := mk(http.StatusServiceUnavailable, CodeSessionMoving, "")
		e.RetryAfter = retryAfterMoving
		return e
	case errors.Is(err, ErrUnknownHost):
		return mk(http.StatusBadRequest, CodeBadRequest, "host")
	case errors.Is(err, ErrHostDown):
		return mk(http.StatusConflict, CodeHostDown, "host")
	case errors.Is(err, ErrNoHost):
		return mk(http.StatusConflict, CodeNoHost, "agent")
	case errors.Is(err, pool.ErrNotOwner):
		// The session left this host (moved, or taken over) since the
		// request was routed: the client sends it again, once, and is
		// forwarded to the new owner.
		return mk(http.StatusConflict, CodeSessionMoved, "")
	}
	return storeUnavailable(err)
}

// knownToken says whether tok is the user token of a host of the cluster.
func (s *Server) knownToken(tok string) bool {
	return tok != "" && s.cfg.Cluster != nil && s.cfg.Cluster.KnownToken(tok)
}

// selfHost is this host's id, or "" without a cluster.
func (s *Server) selfHost() string {
	if s.cfg.Cluster == nil {
		return ""
	}
	return s.cfg.Cluster.Self()
}

// errNoCluster refuses a placement on a daemon that is alone.
func errNoCluster(want string) *Error {
	return badRequest("host", "this daemon shares its store with no other host: field \"host\" (%q) must be left out", want)
}

// sessionMoved answers a forwarded request that reached a host that no
// longer owns the session.
func sessionMoved(session string, owner ClusterHost) *Error {
	return &Error{Status: http.StatusConflict, Code: CodeSessionMoved,
		Message: fmt.Sprintf("session %q moved to host %q while the request was on its way: send it again", session, owner.ID)}
}
