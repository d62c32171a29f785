package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Defaults of Config.
const (
	// DefaultMaxBody is the largest request body accepted.
	DefaultMaxBody = 1 << 20
	// DefaultHeartbeat is the period of the comment lines that keep an
	// idle event stream (and the proxies on its way) alive.
	DefaultHeartbeat = 15 * time.Second
	// DefaultWriteTimeout bounds one write to an event stream's client.
	DefaultWriteTimeout = 30 * time.Second
)

// Log attribute keys.
const (
	logKeyMethod = "method"
	logKeyPath   = "path"
	logKeyErr    = "err"
)

// Config configures a Server. Pool and Registry are required.
type Config struct {
	Pool     Pool
	Registry Registry
	// Catalog is the catalog of agents to add as providers (catalog.go);
	// nil answers its endpoints 501.
	Catalog Catalog
	// Token is the bearer token every request but GET /v1/health must
	// carry. "" disables authentication (see ListenCheck).
	Token string
	// Logger receives internal errors (default slog.Default()).
	Logger *slog.Logger
	// AllowedHosts are Host names accepted besides localhost, 127.0.0.1
	// and [::1], with any port.
	AllowedHosts []string
	// MaxBody is the largest request body accepted (default DefaultMaxBody).
	MaxBody int64
	// Heartbeat is the event streams' keep-alive period (default
	// DefaultHeartbeat).
	Heartbeat time.Duration
	// WriteTimeout bounds one write to an event stream (default
	// DefaultWriteTimeout); a client that reads no faster is cut off.
	WriteTimeout time.Duration
	// Version is reported by GET /v1/health and GET /metrics.
	Version string
	// Confinement, reported by GET /v1/health, says how the kernel
	// confines agents on this machine (a JSON-encodable value).
	Confinement any
	// Trust keeps the trust of repositories' setup files (see trust.go);
	// nil answers the trust endpoints 501.
	Trust Trust
	// PageSessionsFile keeps the hashes of the web page's credentials
	// (mode 0600, written atomically), so that pages stay logged in
	// across a restart; "" keeps them in memory only.
	PageSessionsFile string
	// Conns bounds connections and request reading (see HTTPServer).
	Conns ConnLimits
	// AgentSessions, if set, lists a provider's own sessions whose working
	// directory is repo ("" for all), starting the agent without a session
	// of ours (GET /v1/providers/{id}/sessions); nil answers 409
	// unsupported.
	AgentSessions func(ctx context.Context, provider, repo string) ([]backends.AgentSession, error)
	// Login, if set, asks provider's agent to log in with one of its
	// "agent" methods (POST /v1/providers/{id}/login); nil answers 409
	// unsupported.
	Login func(ctx context.Context, provider, method string) error
	// Reviews keeps reviews of sessions' diffs and their pull requests'
	// URLs (see review.go); nil answers those endpoints 501.
	Reviews Reviews
	// Attempts runs attempt sets (attempts.go); nil answers 501.
	Attempts Attempts
	// Hosts lists the daemons sharing the store (GET /v1/hosts); nil
	// answers 501.
	Hosts Hosts
	// Cluster, when set, is the hosts sharing the pool: requests about a
	// session another host owns are forwarded to it, new sessions are
	// placed, and the other hosts' user tokens are accepted (cluster.go).
	// nil: this host is alone.
	Cluster Cluster
	// ClusterTLS is the client TLS config of host-to-host calls (nil: the
	// system's roots).
	ClusterTLS *tls.Config
	// MCPShares lists the shared MCP servers (GET /v1/mcp/shared and
	// /metrics); nil: none.
	MCPShares MCPShares
}

// Server is the HTTP API. It implements http.Handler. It starts no
// goroutines; Shutdown ends its event streams.
type Server struct {
	cfg     Config
	log     *slog.Logger
	pool    Pool
	reg     Registry
	hosts   map[string]struct{}
	mux     *http.ServeMux
	metrics *metrics
	conns   *connGuard
	fwd     *forwarder // nil without a Cluster
	// keys sign and check host-to-host requests and hellos (nil without a
	// Cluster); nonces are the signatures' nonces seen (hostauth.go).
	keys   hostKeys
	nonces nonceCache

	// base is cancelled by Shutdown; long requests (streams, waits,
	// probes) watch it.
	base   context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	streams sync.WaitGroup

	// logins are the outstanding one-time login links, pages the page
	// credentials they were redeemed for, pageAuths the pages' challenges
	// and run bearers, tickets the attach tickets (see login.go,
	// pagecreds.go, pageauth.go, ticket.go).
	logins    loginCodes
	pages     *pageCreds
	pageAuths pageAuths
	tickets   attachTickets
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil || cfg.Registry == nil {
		return nil, errors.New("httpapi: Pool and Registry are required")
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	cfg.Conns = cfg.Conns.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log, pool: cfg.Pool, reg: cfg.Registry, hosts: map[string]struct{}{}, mux: http.NewServeMux()}
	for _, h := range cfg.AllowedHosts {
		n := normalHost(h)
		if n == "" || strings.ContainsAny(n, "/ ") || strings.Count(n, ":") == 1 {
			return nil, fmt.Errorf("httpapi: allowed host %q must be a bare name or IP, without a port", h)
		}
		s.hosts[n] = struct{}{}
	}
	pages, err := loadPageCreds(cfg.PageSessionsFile, time.Now(), func(msg string, err error) { log.Warn(msg, logKeyErr, err) })
	if err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	s.pages = pages
	s.metrics = newMetrics(s)
	s.conns = newConnGuard(cfg.Conns, log)
	s.base, s.cancel = context.WithCancel(context.Background())
	if cfg.Cluster != nil {
		s.keys = deriveHostKeys(cfg.Cluster.Key())
		s.fwd = newForwarder(s, cfg.ClusterTLS)
	}
	s.routes()
	return s, nil
}

// handlerFunc is a handler that reports failure by returning an error;
// route's adapter answers it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// routes registers every endpoint.
func (s *Server) routes() {
	s.route("GET /v1/health", s.health, true)
	s.route("GET "+helloPath, s.hello, true) // hello.go: the daemon proves it knows a token
	s.catalogRoutes()                        // catalog.go
	s.route("GET /v1/providers", s.providers, false)
	s.route("GET /v1/mcp/shared", s.listMCPShares, false) // mcpshare.go
	s.route("PATCH /v1/providers/{id}", s.patchProvider, false)
	s.route("DELETE /v1/providers/{id}", s.removeProvider, false)
	s.route("POST /v1/providers/refresh", s.refreshProviders, false)
	s.route("POST /v1/providers/{id}/probe", s.probeProvider, false)
	s.route("GET /v1/providers/{id}/sessions", s.agentSessions, false)
	s.route("POST /v1/providers/{id}/login", s.loginAgent, false)
	s.route("POST /v1/sessions", s.createSession, false)
	s.route("GET /v1/sessions", s.listSessions, false)
	s.route("GET /v1/sessions/{id}", s.getSession, false)
	s.route("DELETE /v1/sessions/{id}", s.closeSession, false)
	s.route("POST /v1/sessions/{id}/prompt", s.prompt, false)
	s.route("POST /v1/sessions/{id}/cancel", s.cancelTurn, false)
	s.route("POST /v1/sessions/{id}/retry", s.retry, false)
	s.route("GET /v1/sessions/{id}/turns", s.turns, false)
	s.route("GET /v1/sessions/{id}/turns/{turn}", s.turn, false)
	s.route("GET /v1/sessions/{id}/events", s.sessionEvents, false)
	s.route("GET /v1/sessions/{id}/attach", s.attach, true) // checks the credential itself (also ?ticket=)
	s.route("POST /v1/sessions/{id}/attach-ticket", s.createAttachTicket, false)
	s.route("GET /v1/permissions", s.allPermissions, false)
	s.route("GET /v1/sessions/{id}/permissions", s.permissions, false)
	s.route("POST /v1/sessions/{id}/permissions/{request}", s.answer, false)
	s.route("GET /v1/sessions/{id}/permissions/remembered", s.remembered, false) // remembered.go
	s.route("DELETE /v1/sessions/{id}/permissions/remembered", s.forgetRemembered, false)
	s.route("GET /v1/sessions/{id}/diff", s.diff, false)
	s.route("POST /v1/sessions/{id}/restore", s.restore, false)
	s.route("POST /v1/sessions/{id}/fork", s.fork, false) // fork.go
	s.route("POST /v1/sessions/{id}/merge", s.mergeSession, false)
	s.route("POST /v1/sessions/{id}/commit", s.commitWork, false) // merge.go
	s.route("GET /v1/sessions/{id}/agents/{agent}/config", s.getAgentConfig, false)
	s.route("PUT /v1/sessions/{id}/agents/{agent}/config", s.putAgentConfig, false)
	s.route("GET /v1/sessions/{id}/agents/{agent}/commands", s.agentCommands, false)
	s.route("GET /v1/sessions/{id}/usage", s.sessionUsage, false) // usage.go
	s.route("PUT /v1/sessions/{id}/budget", s.putBudget, false)
	s.route("PUT /v1/sessions/{id}/handoff", s.putHandoff, false)
	s.route("GET /v1/usage", s.usage, false)
	s.route("GET /v1/hosts", s.listHosts, false)
	s.route("GET "+hostHelloPath, s.hostHello, true) // hosthello.go: how a host proves itself
	s.route("POST /v1/attempts", s.startAttempts, false)
	s.route("GET /v1/attempts", s.listAttempts, false)
	s.route("GET /v1/attempts/{id}", s.getAttempts, false)
	s.route("POST /v1/attempts/{id}/pick", s.pickAttempt, false)
	s.route("GET /v1/pool", s.poolStatus, false)
	s.route("DELETE /v1/pool/{session}/{agent}", s.evictBackend, false)
	s.route("POST /v1/prune", s.prune, false)
	s.route("GET /v1/events", s.daemonEvents, false)
	s.route("GET /metrics", s.serveMetrics, false)
	s.route("POST /v1/login-links", s.createLoginLink, false)
	s.route("POST /v1/login", s.login, true)
	s.route("POST /v1/page-auth/challenge", s.pageAuthChallenge, true) // pageauth.go
	s.route("POST /v1/page-auth", s.pageAuthenticate, true)
	s.route("POST /v1/logout", s.logout, false)
	s.route("GET /v1/page-sessions", s.pageSessions, false)
	s.route("DELETE /v1/page-sessions", s.revokePageSessions, false)
	s.route("DELETE /v1/page-sessions/{id}", s.revokePageSession, false)
	s.trustRoutes()  // trust.go
	s.reviewRoutes() // review.go
	s.moveRoutes()   // move.go
	s.webRoutes()
}

// route registers h under pattern behind the adapter: authentication
// (unless public), the body read in full within its limits (body.go),
// forwarding to the host that owns the session the route is about
// (forward.go), error answers and request metrics.
func (s *Server) route(pattern string, h handlerFunc, public bool) {
	param := sessionParam(pattern)
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		defer func() { s.metrics.request(pattern, sw.status) }()
		if !public {
			p, err := s.authenticate(r)
			if err != nil {
				s.writeError(sw, r, err)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
			s.conns.prove(r)
		}
		if err := s.bufferBody(sw, r); err != nil {
			s.writeError(sw, r, err)
			return
		}
		if param != "" && !public {
			if handled, err := s.forwardSession(sw, r, r.PathValue(param)); handled {
				if err != nil && sw.status == 0 {
					s.writeError(sw, r, err)
				}
				return
			}
		}
		if err := h(sw, r); err != nil {
			if sw.status != 0 {
				// Headers are out (a stream failed midway): nothing to answer.
				s.log.Debug("request failed after its answer began", logKeyPath, r.URL.Path, logKeyErr, err)
				return
			}
			s.writeError(sw, r, err)
		}
	}))
}

// ServeHTTP checks the proof of a request that claims to come from
// another host (hostauth.go), else the Host header; answers unknown
// routes and wrong methods with error bodies, and dispatches the others.
// A host's signed request is sent to the name it knows this host by,
// which the Host check (meant for browsers) does not apply to; nor does
// it to the hello, which tells nothing.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer s.guardBody(w, r)()
	if hostClaim(r) {
		var err error
		if r, err = s.hostAuth(w, r); err != nil {
			s.metrics.request("", errorFor(err).Status)
			s.writeError(w, r, err)
			return
		}
	} else if !s.hostAllowed(r.Host) && r.URL.Path != hostHelloPath {
		s.metrics.request("", http.StatusForbidden)
		s.writeError(w, r, &Error{Status: http.StatusForbidden, Code: CodeForbiddenHost,
			Message: fmt.Sprintf("Host %q is not allowed (DNS rebinding protection)", r.Host)})
		return
	}
	if r.Method == http.MethodGet && r.Header.Get("Service-Worker") == "script" {
		// web.go: the page installs no service worker, so one asked for
		// was registered by whatever held this address before.
		s.log.Warn("a browser asked for a service worker this daemon never installed: answered with one that removes it",
			logKeyPath, r.URL.Path)
		serveWorkerRemover(w)
		return
	}
	h, pattern := s.mux.Handler(r)
	if pattern == "" {
		s.noRoute(w, r, h)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// noRoute answers a request no pattern matched: 401 without a valid token
// (so routes are not probed anonymously), else 404 or 405 as the mux would.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request, h http.Handler) {
	if !s.authorized(r) {
		s.metrics.request("", http.StatusUnauthorized)
		s.writeError(w, r, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "missing or wrong bearer token"})
		return
	}
	c := &captureWriter{header: http.Header{}}
	h.ServeHTTP(c, r)
	if c.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", c.header.Get("Allow"))
		s.metrics.request("", c.status)
		s.writeError(w, r, &Error{Status: c.status, Code: CodeMethodNotAllowed,
			Message: fmt.Sprintf("method %s is not allowed here; allowed: %s", r.Method, c.header.Get("Allow"))})
		return
	}
	s.metrics.request("", http.StatusNotFound)
	s.writeError(w, r, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
}

// Shutdown ends every event stream cleanly (each gets a final
// "stream.end" event with reason "shutdown") and cancels the requests that
// wait (prompt?wait=true, probes); it waits until the streams have
// returned. New streams are refused with 503. The caller then shuts its
// http.Server down. Shutdown is idempotent.
func (s *Server) Shutdown() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.streams.Wait()
	s.fwd.close()
}

// longContext returns a context for a request that may last: it ends with
// the request or at Shutdown.
func (s *Server) longContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.base, cancel)
	return ctx, func() { stop(); cancel() }
}

// errShuttingDown answers requests refused or cut short by Shutdown.
var errShuttingDown = &Error{Status: http.StatusServiceUnavailable, Code: CodeShuttingDown, Message: "the server is shutting down"}

// shutdownErr is err, or errShuttingDown once Shutdown has begun.
func (s *Server) shutdownErr(err error) error {
	if s.base.Err() != nil {
		return errShuttingDown
	}
	return err
}

// statusWriter records the status of an answer. It unwraps to the
// original writer so http.ResponseController can flush through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// captureWriter records what the mux's own 404/405 handler would answer.
type captureWriter struct {
	header http.Header
	status int
}

func (c *captureWriter) Header() http.Header { return c.header }

func (c *captureWriter) Write(b []byte) (int, error) { return len(b), nil }

func (c *captureWriter) WriteHeader(code int) { c.status = code }

// seqString formats a seq for an SSE id line.
func seqString(n int64) string { return strconv.FormatInt(n, 10) }
