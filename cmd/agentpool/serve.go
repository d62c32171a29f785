package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/attempts"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/cluster"
	"github.com/agentpool/agentpool/hosts"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/mcpshare"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	"github.com/agentpool/agentpool/registry/catalog"
	"github.com/agentpool/agentpool/store"
	"github.com/agentpool/agentpool/worktree"
)

// Defaults of the daemon.
const (
	DefaultAddr    = "127.0.0.1:7420"
	defaultHomeDir = ".agentpool"
	providersFile  = "providers.json"
	databaseFile   = "agentpool.db"
	// postgresLossLog places, with the store on PostgreSQL, the daemon's
	// own loss log (postgres.lost; see store.Config.Path).
	postgresLossLog = "postgres"
	worktreesDir    = "worktrees"
	// mirrorsDir holds the mirrors of repositories given by URL.
	mirrorsDir = "mirrors"
	tmpDir     = "tmp"
	cgroupFile = "cgroup"
	// trustFile records the setup files (.agentpool.json) the user trusted.
	trustFile = "trusted.json"
	// pageSessionsFile keeps the hashes of the web page's logins.
	pageSessionsFile = "page-sessions.json"
	// catalogFile keeps the agent catalog the user gave (providers catalog
	// --from); without it the built-in snapshot is used.
	catalogFile = "catalog.json"
)

// Budgets of the daemon's shutdown (Main.Close). Each step has its own, so
// a step that overruns never eats the next one's. In-flight HTTP requests
// get httpShutdownBudget, then their connections are closed; the agents
// get agentStopBudget for their stop ladders, and whatever still runs is
// then killed within pool.ShutdownKillWait; the store gets
// storeCloseBudget to write what is queued. Their sum, ShutdownBound, is
// how long SIGTERM takes at most (plus a few milliseconds of bookkeeping),
// whatever the clients and agents do.
const (
	httpShutdownBudget = 2 * time.Second
	agentStopBudget    = 5 * time.Second
	storeCloseBudget   = 2 * time.Second
	// ShutdownBound is the documented bound of Close (10 s).
	ShutdownBound = httpShutdownBudget + agentStopBudget + pool.ShutdownKillWait + storeCloseBudget
)

// Main is the daemon: it opens the store, the registry, the worktree
// manager and the pool, serves the API, and on Close shuts all of it down
// leaving no agent process behind.
type Main struct {
	// Home is the data directory (SQLite file, worktrees, token, providers.json).
	Home string
	// Worktrees is where session worktrees live (default Home/worktrees).
	Worktrees string
	// Addr is the listen address; a non-loopback one needs the token.
	Addr string
	// Pool limits; zero means the pool's defaults.
	MaxWarm int
	// HostID names this daemon among the hosts sharing its store (default:
	// kept in the data directory, made on first start); Advertise is the
	// URL it is reached at (default: http:// and its listen address).
	HostID, Advertise string
	IdleTimeout       time.Duration
	MemoryBudget      int64
	// SlowedRate is the MiB per second at which a slowed agent's events are
	// taken while other sessions are at work (pool.Config.SlowedRate); 0
	// means the pool's default, negative turns the pacing off.
	SlowedRate int
	// Store, when set, is the PostgreSQL database the daemon keeps its
	// state in (a postgres:// URL or a key=value DSN, without a password);
	// "" keeps it in SQLite in Home.
	Store string
	// StorePasswordFile is a file (mode 0600) holding the password of
	// Store; "" leaves it to $PGPASSFILE or ~/.pgpass.
	StorePasswordFile string
	// StoreConns is how many connections to Store the daemon opens at
	// most (0: store.PostgresConns).
	StoreConns int
	// ClusterKeyFile holds the key the hosts of a cluster (a shared
	// PostgreSQL store) present to each other; required with Store.
	ClusterKeyFile string
	// LeaseTTL is how long a host owns its sessions without renewing
	// (default store.DefaultLeaseTTL); Drain hands them to other hosts
	// on Close, within DrainTimeout.
	LeaseTTL time.Duration
	// TLSCert and TLSKey, when set, make the daemon serve HTTPS (required
	// to listen beyond loopback); ClusterCA, when set, is the PEM file of
	// the authorities that sign the other hosts' certificates (default:
	// the system's).
	TLSCert, TLSKey, ClusterCA string
	Drain                      bool
	DrainTimeout               time.Duration
	// CgroupParent is where the daemon's cgroup tree goes ("" finds one,
	// "none" uses the subreaper fallback).
	CgroupParent string
	// NoNamespaces runs agents under Landlock without namespaces of their
	// own, as on a machine that forbids them: for tests only
	// ($AGENTPOOL_TEST_NO_NAMESPACES=1), never in production.
	NoNamespaces bool
	// Notify is a command run for each permission request, ended turn and
	// failed agent, with the event as JSON on stdin ("" = none); a single
	// string is run with /bin/sh -c. See Notifier.
	Notify string
	// Daemons, when set, is the per-user directory in which the daemon
	// leaves a pointer naming Home while it runs (see writePointer), for
	// the CLI to list; "" writes none.
	Daemons string
	// Spares maps a provider id to how many spare sessions to keep per
	// repository; SpareRepos lists repositories to keep them for besides
	// those used in the last day (see spares.go).
	Spares     map[string]int
	SpareRepos []string
	// MCPIdleTimeout stops a shared MCP server nobody called for that
	// long; NoMCPShare gives every agent its own copies (serve_mcpshare.go).
	MCPIdleTimeout time.Duration
	NoMCPShare     bool
	Logger         *slog.Logger
	Stdout         io.Writer

	store      *store.Store
	sandbox    *sandbox.Manager
	egress     *wiring.Egress
	wt         *worktree.Manager
	reg        *registry.Registry
	pool       *pool.Pool
	api        *httpapi.Server
	hosts      *hosts.Heartbeat
	cluster    *cluster.Cluster
	clusterTLS *tls.Config
	http       *http.Server
	ln         net.Listener
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	closeMu    sync.Mutex
	closed     bool
	// broughtBack counts the open sessions of this host that the daemon
	// found in its store at start, for the banner.
	broughtBack int

	// attempts runs attempt sets over the pool.
	attempts *attempts.Manager
	// mcpShare runs the shared MCP servers (nil: --no-mcp-share).
	mcpShare *mcpshare.Manager

	// pushes are the pushes after checkpoints running in the background
	// (several hosts only).
	pushes *wiring.Pushes
}

// Open starts the daemon and returns once it is listening.
func (m *Main) Open(ctx context.Context) error {
	if m.Logger == nil {
		m.Logger = slog.Default()
	}
	if m.Stdout == nil {
		m.Stdout = io.Discard
	}
	home, err := filepath.Abs(m.Home)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	m.Home = home
	// The port first: a daemon that cannot listen must not leave a new
	// data directory behind. Held from here on; closed if Open fails.
	ln, err := listen(m.Addr, home, m.Daemons)
	if err != nil {
		return err
	}
	opened := false
	defer func() {
		if !opened {
			_ = ln.Close()
		}
	}()
	if err := m.secureHome(home); err != nil {
		return err
	}
	token, err := httpapi.LoadOrCreateToken(filepath.Join(home, tokenFileName))
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	if err := httpapi.ListenCheckTLS(m.Addr, token, m.TLSCert, m.TLSKey); err != nil {
		return err
	}
	provPath := filepath.Join(home, providersFile)
	if _, err := os.Stat(provPath); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(provPath, []byte("{\n  \"version\": 1,\n  \"providers\": {}\n}\n"), 0o600); err != nil {
			return fmt.Errorf("create %s: %w", provPath, err)
		}
	}
	hostID, err := m.hostID(home)
	if err != nil {
		return err
	}
	scfg := store.Config{Path: filepath.Join(home, databaseFile), Logger: m.Logger, CloseTimeout: storeCloseBudget, HostID: hostID, LeaseTTL: m.LeaseTTL}
	if m.Store != "" {
		scfg.URL, scfg.PasswordFile, scfg.Path = m.Store, m.StorePasswordFile, filepath.Join(home, postgresLossLog)
		scfg.MaxConns = m.StoreConns
	}
	m.store, err = store.Open(ctx, scfg)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		m.shutdownParts()
		return fmt.Errorf("own executable: %w", err)
	}
	if err := m.checkSecretFiles(); err != nil {
		m.shutdownParts()
		return err
	}
	if err := m.openSandbox(self); err != nil {
		m.shutdownParts()
		return err
	}
	if err := m.openEgress(ln, home); err != nil {
		m.shutdownParts()
		return err
	}
	wt, err := worktree.NewManager(worktree.Config{Root: m.worktreesRoot(home), Logger: m.Logger,
		TrustFile: filepath.Join(home, trustFile), MirrorRoot: filepath.Join(home, mirrorsDir), SetupSandbox: wiring.SetupJails{
			Sandbox: m.sandbox, TmpRoot: filepath.Join(home, tmpDir), Home: wiring.DefaultHome(), Protect: append(protectedHomes(home, os.Getenv), m.secretFiles()...),
			Egress: m.egress}})
	if err != nil {
		m.shutdownParts()
		return fmt.Errorf("worktrees: %w", err)
	}
	m.wt = wt
	confiner := wiring.Confiner{
		Sandbox: m.sandbox, TmpRoot: filepath.Join(home, tmpDir), Home: wiring.DefaultHome(), Protect: protectedHomes(home, os.Getenv),
		Secrets: m.secretFiles(), Git: wiring.GitPathsOf(wt), Egress: m.egress,
	}
	if err := m.openMCPShare(home, confiner); err != nil {
		m.shutdownParts()
		return err
	}
	m.reg, err = registry.New(registry.Config{Path: provPath, SelfPath: self, Prober: acp.Prober{Logger: m.Logger, Jail: confiner.ProbeJail}, SIGHUP: true, Logger: m.Logger,
		Trust: trustedProviders, SandboxNotes: confiner.ConfigNotes, ProbeDir: filepath.Join(home, tmpDir)})
	if err != nil {
		m.shutdownParts()
		return fmt.Errorf("registry: %w", err)
	}
	// Before the first launch: each provider's status shows what its
	// agents were refused.
	m.egress.Report = m.reg.NetworkRefused
	worktrees := wiring.Worktrees{M: wt, Logger: m.Logger}
	var leases pool.Leases
	if m.store.Leasing() {
		// Before the recovery: it handles only the sessions this host
		// owns, and a previous run of this host is fenced off.
		owned, err := m.store.ClaimOwn(ctx)
		if err != nil {
			m.shutdownParts()
			return fmt.Errorf("claim this host's sessions: %w", err)
		}
		m.Logger.Info("sessions owned by this host", "host", hostID, "sessions", len(owned))
		leases, worktrees.Ledger = wiring.Leases{S: m.store}, wiring.Leases{S: m.store}
		// A turn's end does not wait for its push (a close does).
		m.pushes = wiring.NewPushes()
		worktrees.Pushes = m.pushes
	}
	m.pool, err = pool.New(pool.Config{
		Store: wiring.Store{S: m.store}, Usage: wiring.Usage{S: m.store}, Reviews: wiring.Reviews{S: m.store}, Worktrees: worktrees, Resolver: m.reg, Leases: leases,
		Launcher: wiring.Launcher{Logger: m.Logger, Confiner: confiner, Report: m.reg.SetLaunchReport, Identity: wt.Identity,
			MCP: m.mcpShare, RelayCommand: wiring.RelayCommand(self)},
		MaxWarm: m.MaxWarm, IdleTimeout: m.IdleTimeout, SlowedRate: slowedRate(m.SlowedRate),
		MemoryBudget: m.MemoryBudget, Logger: m.Logger, Spares: m.sparesConfig(wt),
	})
	if err != nil {
		m.shutdownParts()
		return err
	}
	if err := m.pool.Recover(ctx); err != nil {
		m.Logger.Warn("recover from the previous daemon", "err", err)
	}
	m.broughtBack = m.openSessionsHere(ctx, hostID)
	m.attempts, err = attempts.New(ctx, attempts.Config{Pool: m.pool, Git: wiring.AttemptsGit{M: wt}, Store: m.store, Logger: m.Logger,
		Known: func(id string) bool { _, ok := m.reg.Snapshot().Provider(id); return ok }})
	if err != nil {
		m.shutdownParts()
		return err
	}
	agents := catalog.Open(catalog.Config{Path: filepath.Join(home, catalogFile), Logger: m.Logger})
	m.reconcile(ctx, wt)
	if err := m.openHosts(ln.Addr().String(), hostID, token); err != nil {
		m.shutdownParts()
		return err
	}
	if err := m.openCluster(); err != nil {
		m.shutdownParts()
		return err
	}
	// Agents run outside any session: to list theirs, or to log in.
	outside := wiring.NewAgentSessions(m.reg.Resolve, acp.Prober{Logger: m.Logger, Jail: confiner.ProbeJail}, filepath.Join(home, tmpDir))
	allowed, err := m.allowedHosts()
	if err != nil {
		m.shutdownParts()
		return err
	}
	m.api, err = httpapi.New(httpapi.Config{Pool: m.pool, Registry: m.reg, Catalog: agents, Token: token, Logger: m.Logger, Version: version, AllowedHosts: allowed,
		Confinement: m.sandbox.Status(), Trust: wiring.Trust{M: wt}, PageSessionsFile: filepath.Join(home, pageSessionsFile),
		Conns:         httpapi.ConnLimits{FileLimit: fileLimit(m.Logger)},
		AgentSessions: outside.List, Login: outside.Login, Reviews: wiring.Reviews{S: m.store}, Attempts: m.attempts, Hosts: m.hosts,
		Cluster: m.clusterAPI(), ClusterTLS: m.clusterTLS, MCPShares: m.mcpShares()})
	if err != nil {
		m.shutdownParts()
		return err
	}
	if m.cluster != nil {
		// A host started with another key than the cluster's says so and
		// stops, before any host lists it.
		if err := m.checkHosts(ctx); err != nil {
			m.shutdownParts()
			return err
		}
	}
	// Registered before the first request is served: a daemon that
	// answers is among the hosts (Run beats from then on).
	if err := m.hosts.Beat(ctx); err != nil {
		m.Logger.Warn("host heartbeat failed", "host", m.hosts.ID(), "err", err)
	}
	m.ln = ln
	opened = true
	runCtx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.http = m.api.HTTPServer(slog.NewLogLogger(m.Logger.Handler(), slog.LevelWarn))
	m.wg.Add(4)
	go func() { defer m.wg.Done(); _ = m.reg.Run(runCtx) }()
	go func() { defer m.wg.Done(); _ = m.pool.Run(runCtx) }()
	go func() { defer m.wg.Done(); m.forwardProviderChanges(runCtx) }()
	m.wg.Add(1)
	go func() { defer m.wg.Done(); m.hosts.Run(runCtx) }()
	if m.cluster != nil {
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.cluster.Run(runCtx) }()
	}
	if m.Notify != "" {
		n := &Notifier{Command: []string{m.Notify}, Logger: m.Logger}
		m.wg.Add(1)
		go func() { defer m.wg.Done(); n.Run(runCtx, m.pool.SubscribeAll) }()
	}
	go func() {
		defer m.wg.Done()
		if err := m.serveHTTP(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.Logger.Error("http server", "err", err)
		}
	}()
	addr := m.ln.Addr().String()
	// The pointer first, so that a client that sees daemon.json finds it
	// listed too; until daemon.json is written a client skips it.
	if m.Daemons != "" {
		if err := writePointer(m.Daemons, home); err != nil {
			m.Logger.Warn("write the per-user pointer to this data directory", "err", err)
		}
	}
	if err := writeDaemonFile(home, m.daemonInfo(addr)); err != nil {
		m.Logger.Warn("write daemon.json", "err", err)
	}
	m.banner(addr)
	return nil
}

// hostIDFile, in the data directory, keeps this daemon's host id.
const hostIDFile = "host-id"

// hostID is this daemon's id among the hosts sharing its store:
// --host-id, else the one kept in the data directory.
func (m *Main) hostID(home string) (string, error) {
	if m.HostID != "" {
		return m.HostID, hosts.ValidID(m.HostID)
	}
	return hosts.LoadID(filepath.Join(home, hostIDFile))
}

// openHosts makes the heartbeat that registers this daemon among the
// hosts sharing its store, under its id and address (--advertise, else
// addr's http URL), with the hash of its user token.
func (m *Main) openHosts(addr, id, token string) error {
	advertise := m.Advertise
	if advertise == "" {
		advertise = "http://" + addr
	}
	if u, err := url.Parse(advertise); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--advertise %q: want an http:// or https:// URL with a host", advertise)
	}
	if m.Store != "" {
		// Other hosts call it: https unless it is on loopback.
		if _, err := httpapi.CheckAdvertiseURL(advertise); err != nil {
			return fmt.Errorf("--advertise: %w", err)
		}
	}
	maxWarm := m.MaxWarm
	if maxWarm <= 0 {
		maxWarm = pool.DefaultMaxWarm
	}
	var err error
	m.hosts, err = hosts.New(hosts.Config{Store: wiring.Hosts{S: m.store}, ID: id, Advertise: advertise, Capacity: maxWarm, Version: version,
		Interval: m.heartbeatInterval(), Logger: m.Logger, Providers: m.readyProviders, TokenSHA256: sha256Hex(token),
		Draining: func() bool { return m.cluster != nil && m.cluster.Draining() }, Load: func() (int, int) {
			st := m.pool.Stats()
			warm := 0
			for _, states := range st.Warm {
				for _, n := range states {
					warm += n
				}
			}
			if m.store.Leasing() {
				// The sessions leased here, loaded or not.
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if n, err := m.store.OwnedCount(ctx); err == nil {
					return warm, n
				}
			}
			return warm, st.Sessions
		}})
	return err
}

// soloHeartbeat is how often a daemon alone on its SQLite store
// heartbeats: no other host reads it, and a write every 2 s would keep an
// idle laptop's disk busy for nothing.
const soloHeartbeat = time.Minute

// heartbeatInterval is hosts.DefaultInterval on a shared (PostgreSQL)
// store, soloHeartbeat on SQLite.
func (m *Main) heartbeatInterval() time.Duration {
	if m.Store == "" {
		return soloHeartbeat
	}
	// A host is seen as gone after three missed heartbeats: within a
	// lease's time to live, so that a host whose sessions are taken over
	// is no longer placed any.
	ttl := m.LeaseTTL
	if ttl <= 0 {
		ttl = store.DefaultLeaseTTL
	}
	return min(hosts.DefaultInterval, ttl/3)
}

// readyProviders are the ids of the providers this daemon can run now:
// ready, or installed and being probed.
func (m *Main) readyProviders() []string {
	var out []string
	for _, p := range m.reg.Snapshot().Providers {
		if p.Status == registry.StatusReady || p.Status == registry.StatusProbing {
			out = append(out, p.ID)
		}
	}
	return out
}

// reconcile compares the worktrees the database knows with git and the
// disk, and reports what does not match. Nothing is pruned automatically.
func (m *Main) reconcile(ctx context.Context, wt *worktree.Manager) {
	rows, err := m.store.ListWorktrees(ctx, false)
	if err != nil {
		m.Logger.Warn("reconcile worktrees: list", "err", err)
		return
	}
	var known []worktree.Worktree
	for _, r := range rows {
		if m.store.Leasing() && r.Host != "" && r.Host != m.store.HostID() {
			continue // on another host's disk
		}
		s, err := m.store.GetSession(ctx, r.SessionID)
		if err != nil {
			continue
		}
		known = append(known, worktree.Worktree{Session: r.SessionID, Repo: s.Repo, Path: r.Path, Branch: r.Branch, BaseCommit: r.BaseCommit, CreatedAt: r.CreatedAt})
	}
	rep, err := wt.Reconcile(ctx, known, false)
	if err != nil {
		m.Logger.Warn("reconcile worktrees", "err", err)
		return
	}
	for _, w := range rep.Missing {
		m.Logger.Warn("worktree missing on disk; it will be re-created from its branch when needed", "session", w.Session, "path", w.Path, "branch", w.Branch)
	}
	for _, f := range rep.Unknown {
		if m.removeOrphanSpare(ctx, wt, f) {
			continue
		}
		m.Logger.Warn("worktree unknown to the database (left alone)", "path", f.Path, "branch", f.Branch)
	}
	for _, p := range rep.Problems {
		m.Logger.Warn("worktree problem", "path", p.Path, "err", p.Err)
	}
}

// forwardProviderChanges tells the pool about disabled, removed and
// changed providers, so their backends stop or recycle.
func (m *Main) forwardProviderChanges(ctx context.Context) {
	_, ch, cancel := m.reg.Subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-ch:
			if !ok {
				// Dropped for falling behind: subscribe again.
				_, ch, cancel = m.reg.Subscribe()
				continue
			}
			if len(c.Disabled)+len(c.Removed)+len(c.SpecChanged) > 0 {
				m.pool.ProviderChanged(append(append([]string(nil), c.Disabled...), c.Removed...), c.SpecChanged)
			}
		}
	}
}

// listen binds addr. A port in use is reported with who holds it, when
// it is this home's daemon or another of the user's daemons listed in
// daemons (see listDaemons), and how to reach it or pick another port.
func listen(addr, home, daemons string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	host, port, _ := net.SplitHostPort(addr)
	who := "another program (another agentpool daemon?)"
	if d, derr := readDaemonFile(home); derr == nil && d.alive() && d.PID > 0 {
		if d.port() == port {
			who = fmt.Sprintf("the daemon of this data directory, %s (pid %d): it is already running", home, d.PID)
		}
	}
	if strings.HasPrefix(who, "another program") {
		running, _ := listDaemons(daemons) // pointer.go
		for _, r := range running {
			if r.info.port() == port {
				self := defaultSelf
				if len(os.Args) > 0 {
					self = invokedAs(os.Args[0])
				}
				who = fmt.Sprintf("another of your agentpool daemons, the one of the data directory %s (pid %d); "+
					"reach it with AGENTPOOL_HOME=%s %s <command> (%s daemons lists your daemons)",
					r.Home, r.PID, shellQuote(r.Home), self, self)
				break
			}
		}
	}
	return nil, fmt.Errorf("port %s (%s) is in use by %s; stop that, or pick another port with --addr %s:PORT "+
		"or AGENTPOOL_LISTEN (port 0 picks a free one; clients find it in %s): %w",
		port, addr, who, host, daemonFileName, err)
}

// banner says where the daemon listens, which agents can start, and the
// commands to try first, with the command as the user invoked it.
func (m *Main) banner(addr string) {
	self := defaultSelf
	if len(os.Args) > 0 {
		self = invokedAs(os.Args[0])
	}
	var ready, missing, disabled, broken []string
	for _, p := range m.reg.Snapshot().Providers {
		switch _, err := m.reg.Resolve(p.ID); { // launchable, even while probing
		case err == nil:
			ready = append(ready, p.ID)
		case errors.Is(err, registry.ErrDisabled):
			disabled = append(disabled, p.ID)
		case errors.Is(err, registry.ErrNotInstalled):
			missing = append(missing, p.ID)
		default:
			broken = append(broken, p.ID)
		}
	}
	var agents strings.Builder
	for _, l := range []struct {
		label string
		ids   []string
	}{{"ready", ready}, {"not installed", missing}, {"disabled", disabled}, {"error", broken}} {
		if len(l.ids) > 0 {
			fmt.Fprintf(&agents, "\n    %-14s %s", l.label+":", strings.Join(l.ids, ", "))
		}
	}
	cwd, _ := os.Getwd()
	where, repo := "this repository", shellQuote(cwd)
	if top, err := gitTopLevel(context.Background(), cwd); err == nil {
		repo = shellQuote(top)
	} else {
		where, repo = "a git repository", "/path/to/repo"
	}
	if m.cluster != nil {
		// A session on a local path stays on its host: a cluster's
		// repositories are given by URL, pushed to at every checkpoint.
		where, repo = "a repository the hosts share (by URL, so that any host can continue it)", "git@git.example:team/project.git"
	}
	fmt.Fprintf(m.Stdout, `agentpool %s listening on http://%s
  data:      %s
  providers: %s
  agents:%s
%s
Open a session on %s and talk to the demo agent:
  %s session new --repo %s
  %s prompt <session-id> "add a greeting"

Agents are enabled by default and ready as soon as their command is on the daemon's PATH,
without a restart: see docs/agents.md, and '%s providers list'.
`, version, addr, m.Home, filepath.Join(m.Home, providersFile), agents.String(), broughtBackLine(m.broughtBack, self), where, self, repo, self, self)
	m.bannerLogin(addr, self)
}

// openSessionsHere counts the open sessions of the store that this host
// holds (all of them without several hosts): those a restart brought back.
func (m *Main) openSessionsHere(ctx context.Context, hostID string) int {
	all, err := m.store.ListSessions(ctx)
	if err != nil {
		m.Logger.Warn("count the sessions brought back", "err", err)
		return 0
	}
	n := 0
	for _, s := range all {
		if s.Status == store.SessionOpen && (s.Host == "" || s.Host == hostID || !m.store.Leasing()) {
			n++
		}
	}
	return n
}

// broughtBackLine is the banner's line about the open sessions found at
// start, empty when there are none.
func broughtBackLine(n int, self string) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("  sessions:  %d %s brought back (list %s: %s session list)\n", n, pluralOf(n, "session", "sessions"), pluralOf(n, "it", "them"), self)
}

// Addr returns the address the daemon listens on.
func (m *Main) ListenAddr() string { return m.ln.Addr().String() }

// Close shuts the daemon down, each step under its own budget: stop
// accepting connections and refuse new requests; give requests in flight
// httpShutdownBudget, then close their connections (a client that never
// finishes its request does not hold the daemon); cancel turns and stop
// every agent within agentStopBudget, killing what is left; sweep the
// daemon's cgroup tree in case an agent escaped the pool; close the store,
// which writes the events still queued within storeCloseBudget. It
// returns within ShutdownBound, and an error only when the store could not
// be closed cleanly (events may be lost); the other steps' troubles are
// logged. It is idempotent.
func (m *Main) Close() error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	begin := time.Now()
	if m.Drain {
		// Before anything stops: the sessions leave with their work while
		// this host still answers (forwarded requests included).
		m.drain()
	}

	// The API refuses new requests and ends its event streams while the
	// server stops accepting and waits for the requests in flight; a stream
	// stuck writing to a client that does not read ends when its
	// connection is closed.
	apiDone := make(chan struct{})
	go func() { defer close(apiDone); m.api.Shutdown() }()
	hctx, cancel := context.WithTimeout(context.Background(), httpShutdownBudget)
	if err := m.http.Shutdown(hctx); err != nil {
		m.Logger.Warn("http shutdown: closing the connections of requests still in flight", "budget", httpShutdownBudget, "err", err)
		if err := m.http.Close(); err != nil {
			m.Logger.Warn("http close", "err", err)
		}
	}
	cancel()
	select {
	case <-apiDone:
	case <-time.After(pool.ShutdownKillWait):
		m.Logger.Warn("http shutdown: event streams still running after their connections were closed")
	}

	m.attempts.Close()
	pctx, cancel := context.WithTimeout(context.Background(), agentStopBudget)
	if err := m.pool.Shutdown(pctx); err != nil {
		m.Logger.Warn("pool shutdown", "budget", agentStopBudget, "err", err)
	}
	cancel()
	if m.pushes != nil {
		// The last turns' checkpoints reach the shared repositories
		// before the daemon stops.
		pctx, cancel := context.WithTimeout(context.Background(), pushWaitBudget)
		if err := m.pushes.WaitAll(pctx); err != nil {
			m.Logger.Warn("pushes still running at stop", "budget", pushWaitBudget, "err", err)
		}
		cancel()
	}
	m.cancel()
	m.wg.Wait()
	// The pool has stopped every agent it knows; the sweep makes sure no
	// process of the daemon's agents (or of what they started) remains.
	if m.sandbox != nil {
		if n, err := m.sandbox.Sweep(); err != nil || n > 0 {
			m.Logger.Warn("killed agent processes left after the pool's shutdown", "count", n, "err", err)
		}
	}
	_ = os.Remove(filepath.Join(m.Home, daemonFileName))
	if m.Daemons != "" {
		removePointer(m.Daemons, m.Home) // Open made m.Home absolute
	}
	err := m.shutdownParts()
	m.Logger.Info("shut down", "took", time.Since(begin).Round(time.Millisecond), "bound", ShutdownBound)
	return err
}

// shutdownParts closes what Open opened besides the pool and the server;
// it returns the store's error (events that could not be written).
func (m *Main) shutdownParts() error {
	if m.reg != nil {
		_ = m.reg.Close()
	}
	m.closeMCPShare()
	if m.sandbox != nil {
		_ = m.sandbox.Close()
	}
	m.closeEgress()
	if m.wt != nil {
		if err := m.wt.Close(); err != nil {
			m.Logger.Warn("close worktrees", "err", err)
		}
	}
	if m.store != nil {
		if err := m.store.Close(); err != nil {
			m.Logger.Error("close store", "err", err)
			return err
		}
	}
	return nil
}

// openSandbox finds where agents can be contained, and ends whatever a
// previous daemon on this home left running: agents, their terminals and
// anything they started, whatever process group or session they moved to.
// Their private TMPDIRs go too.
func (m *Main) openSandbox(self string) error {
	// The small launcher beside the daemon starts in less than half the
	// time its own binary takes, for each confined process.
	launcher, why := sandbox.LauncherNextTo(self)
	if why != "" {
		m.Logger.Warn("confined processes start through the daemon's own binary", "reason", why)
	}
	sb, err := sandbox.Open(sandbox.Config{
		Name: sandbox.TreeName(m.Home), CgroupParent: m.CgroupParent, StateFile: filepath.Join(m.Home, cgroupFile),
		Launcher: launcher, NoNamespaces: m.NoNamespaces, Logger: m.Logger,
	})
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	m.sandbox = sb
	n, err := sb.Sweep()
	if err != nil {
		m.Logger.Warn("sweep what the previous daemon left", "err", err)
	}
	if n > 0 {
		m.Logger.Info("killed processes left by the previous daemon", "count", n)
	}
	if err := os.RemoveAll(filepath.Join(m.Home, tmpDir)); err != nil {
		m.Logger.Warn("remove stale session TMPDIRs", "err", err)
	}
	st := sb.Status()
	m.Logger.Info("confinement", "containment", st.Containment, "cgroup", st.Cgroup, "landlock_abi", st.Landlock, "namespaces", st.Namespaces, "launcher", launcher[0])
	for _, w := range st.Warnings {
		m.Logger.Warn("confinement: " + w)
	}
	return nil
}

// hideSecrets keeps the daemon's secrets out of its agents' reach. The
// daemon never needs AGENTPOOL_TOKEN (it reads its token file), but a user
// may have exported it for the CLI: /proc/PID/environ shows the environment
// a process started with, so the daemon re-executes itself without it.
// And it makes itself non-dumpable, so that a process of the same user
// (an agent) cannot read its memory, environment or file descriptors
// through /proc; the agents themselves become dumpable again when they
// exec.
func hideSecrets() {
	if _, ok := os.LookupEnv("AGENTPOOL_TOKEN"); ok {
		self, err := os.Executable()
		if err == nil {
			env := make([]string, 0, len(os.Environ()))
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "AGENTPOOL_TOKEN=") {
					env = append(env, kv)
				}
			}
			err = syscall.Exec(self, os.Args, env)
		}
		fmt.Fprintln(os.Stderr, "agentpool: warning: could not drop AGENTPOOL_TOKEN from the daemon's environment:", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "agentpool: warning: could not make the daemon non-dumpable:", err)
	}
}

// runServe parses serve's flags and runs the daemon until ctx ends.
// slowedRate turns Main.SlowedRate (MiB/s; 0 the default, negative off)
// into pool.Config.SlowedRate.
func slowedRate(mib int) int64 {
	if mib < 0 {
		return -1
	}
	return int64(mib) << 20
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s serve [flags]\n\nRuns the daemon. Data lives in --home, by default $AGENTPOOL_HOME, else the\n"+
			"nearest %s at or above the current directory (not above your home directory),\n"+
			"else $XDG_STATE_HOME/agentpool or ~/.local/state/agentpool. Clients find the\n"+
			"daemon by the same rule; every daemon names its data directory in the per-user\n"+
			"directory's daemons/ while it runs, for clients to list ('agentpool daemons').\n"+
			"A data directory that another user owns or may write is never used; the daemon\n"+
			"keeps its own 0700, its files 0600.\n\nFlags:\n", invokedAs(os.Args[0]), defaultHomeDir)
		printFlags(fs) // cli.go
	}
	m := &Main{Stdout: stdout, Daemons: daemonsDir(os.Getenv)}
	fs.StringVar(&m.Home, "home", "", "data directory (default: found as said above)")
	fs.StringVar(&m.Worktrees, "worktrees", os.Getenv("AGENTPOOL_WORKTREES"), "directory for the sessions' worktrees (default: worktrees in the data directory)")
	fs.StringVar(&m.Addr, "addr", envOr("AGENTPOOL_LISTEN", DefaultAddr), "listen address (loopback unless you know what you are doing; $AGENTPOOL_LISTEN sets the default)")
	fs.IntVar(&m.MaxWarm, "max-warm", 0, "most agents kept running (default 16)")
	fs.StringVar(&m.HostID, "host-id", os.Getenv("AGENTPOOL_HOST_ID"), "this daemon's name among the hosts sharing its store (default: made on first start, kept in the data directory)")
	fs.StringVar(&m.Advertise, "advertise", os.Getenv("AGENTPOOL_ADVERTISE"), "the URL other hosts and clients reach this daemon at (default: http:// and the listen address)")
	fs.StringVar(&m.Notify, "notify", os.Getenv("AGENTPOOL_NOTIFY"), "command run for each permission request, ended turn and failed agent, with the event as JSON on stdin (see docs/daemon.md)")
	// Tests run the daemon as on a machine that forbids namespaces.
	m.NoNamespaces = os.Getenv("AGENTPOOL_TEST_NO_NAMESPACES") == "1"
	fs.StringVar(&m.CgroupParent, "cgroup-parent", os.Getenv("AGENTPOOL_CGROUP_PARENT"), "cgroup v2 directory for the agents' cgroups (default: found at start; \"none\": no cgroups)")
	fs.DurationVar(&m.IdleTimeout, "idle-timeout", 0, "stop an agent unused this long (default 15m, providers may override)")
	fs.Func("slowed-rate", fmt.Sprintf("`MiB` per second at which an agent flooding the store is read while other sessions are at work (default %d; 0: no pacing; see docs/durability.md)", pool.DefaultSlowedRate>>20), func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("want a whole number of MiB per second, 0 for no pacing: %q", v)
		}
		m.SlowedRate = n
		if n == 0 {
			m.SlowedRate = -1
		}
		return nil
	})
	fs.StringVar(&m.Store, "store", os.Getenv("AGENTPOOL_STORE"), "keep state in PostgreSQL: a postgres:// `URL` or key=value DSN, without a password ($AGENTPOOL_STORE; default: SQLite in the data directory; see docs/several-hosts.md)")
	fs.StringVar(&m.ClusterKeyFile, "cluster-key-file", os.Getenv(clusterKeyEnv), "with --store: a `FILE` (0600) holding the key the hosts of the cluster present to each other, the same on every host ($"+clusterKeyEnv+")")
	fs.DurationVar(&m.LeaseTTL, "lease-ttl", 0, "with --store: how long this host owns its sessions without renewing; another host takes them over after (default 10s)")
	fs.StringVar(&m.TLSCert, "tls-cert", os.Getenv("AGENTPOOL_TLS_CERT"), "serve HTTPS with this certificate `FILE` (PEM; required to listen beyond loopback, with --tls-key)")
	fs.StringVar(&m.TLSKey, "tls-key", os.Getenv("AGENTPOOL_TLS_KEY"), "the private key `FILE` of --tls-cert (PEM)")
	fs.StringVar(&m.ClusterCA, "cluster-ca", os.Getenv("AGENTPOOL_CLUSTER_CA"), "with --store: the PEM `FILE` of the authorities that sign the other hosts' certificates (default: the system's)")
	fs.BoolVar(&m.Drain, "drain", false, "with --store: on stop, hand every session to other hosts first (waiting for running turns, up to --drain-timeout)")
	fs.DurationVar(&m.DrainTimeout, "drain-timeout", DefaultDrainTimeout, "how long --drain waits for sessions to be handed over")
	fs.StringVar(&m.StorePasswordFile, "store-password-file", os.Getenv("AGENTPOOL_STORE_PASSWORD_FILE"), "a `FILE` only you can read (0600) holding the password of --store (default: $PGPASSFILE or ~/.pgpass)")
	fs.Func("store-conns", fmt.Sprintf("with --store: how many connections to PostgreSQL this daemon opens at most, %d or more ($AGENTPOOL_STORE_CONNS; default %d)", store.MinPostgresConns, store.PostgresConns), m.setStoreConns)
	if v := os.Getenv("AGENTPOOL_STORE_CONNS"); v != "" {
		if err := m.setStoreConns(v); err != nil {
			return fmt.Errorf("$AGENTPOOL_STORE_CONNS: %w", err)
		}
	}
	m.mcpShareFlags(fs) // serve_mcpshare.go
	budget := fs.Int64("memory-budget-mb", 0, "memory budget for all agents in MiB (default half the machine; -1 disables)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	fs.Func("spares", "keep N spare sessions of provider ID per repository, as ID=N (repeatable; $AGENTPOOL_SPARES: ID=N,...; see docs/daemon.md)", m.addSpares)
	fs.Func("spares-repo", "a repository to keep spares for, besides those used in the last day (repeatable; $AGENTPOOL_SPARES_REPOS: a path list)", m.addSpareRepo)
	if err := m.sparesFromEnv(os.Getenv); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return exitError(2)
	}
	if err := checkStoreFlags(m.Store, m.StorePasswordFile); err != nil {
		return err
	}
	if m.StoreConns != 0 && m.Store == "" {
		return errors.New("--store-conns needs --store (or $AGENTPOOL_STORE)")
	}
	if m.Home == "" {
		cwd, _ := os.Getwd()
		m.Home, _ = findHome(os.Getenv, cwd, stderr)
	}
	if *budget > 0 {
		m.MemoryBudget = *budget << 20
	} else if *budget < 0 {
		m.MemoryBudget = -1
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	m.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	slog.SetDefault(m.Logger)
	if err := m.Open(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	fmt.Fprintln(stdout, "agentpool: shutting down")
	return m.Close()
}

// setStoreConns sets StoreConns from v, a number of connections of at
// least store.MinPostgresConns.
func (m *Main) setStoreConns(v string) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < store.MinPostgresConns {
		return fmt.Errorf("want a number of connections of at least %d, not %q", store.MinPostgresConns, v)
	}
	m.StoreConns = n
	return nil
}

// checkStoreFlags refuses, before anything starts, a --store that is no
// PostgreSQL connection string or that carries a password, and a password
// file without a store.
func checkStoreFlags(url, passwordFile string) error {
	switch {
	case url == "" && passwordFile != "":
		return errors.New("--store-password-file needs --store (or $AGENTPOOL_STORE)")
	case url == "":
		return nil
	case !store.IsPostgresURL(url) && !strings.Contains(url, "="):
		return fmt.Errorf("--store: want a postgres:// URL or a key=value DSN, not %q", url)
	case store.HasPassword(url):
		return fmt.Errorf("--store: %w", store.ErrPasswordInURL)
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// daemonInfo is what daemon.json records of this daemon listening on
// addr: serving HTTPS, the URL the CLI calls it by (the advertised one
// when it is https, whose name the certificate holds, else addr's) and
// the certificate file to trust.
func (m *Main) daemonInfo(addr string) daemonInfo {
	d := daemonInfo{Addr: addr, PID: os.Getpid()}
	if m.TLSCert == "" {
		return d
	}
	d.Addr = "https://" + addr
	if u, err := url.Parse(m.Advertise); err == nil && u.Scheme == "https" && u.Host != "" {
		d.Addr = "https://" + u.Host
	}
	if abs, err := filepath.Abs(m.TLSCert); err == nil {
		d.Cert = abs
	}
	return d
}
