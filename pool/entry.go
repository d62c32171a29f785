package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// key identifies a backend: one per (session, agent).
type key struct{ session, agent string }

// entry is one (session, agent) backend. Its fields are guarded by Pool.mu.
type entry struct {
	key  key
	sess *session
	// early is what was started early for the key's first start, which
	// passes it to the launch (early.go).
	early   Early
	spec    backends.Spec
	hash    string
	backend backends.Backend
	state   string // starting | idle | stopping | crashed | stopped; busy is inUse
	inUse   bool
	started chan struct{}
	err     error
	info    backends.Info
	// launched is the backend while its Start runs (nil before Launch
	// and after Start returns), for a kill at a shutdown's deadline.
	launched backends.Backend
	// cancelStart cuts a start in flight short; set at creation, never
	// changed. Stopping an entry calls it: a backend whose Start fails
	// stops the process it spawned.
	cancelStart context.CancelFunc
	// warmup marks an entry a session's creation started before any
	// prompt (see warmup.go); set at creation, never changed.
	warmup bool

	// adv is what the running agent advertises (see agentconfig.go).
	adv advertisedState

	// heard is the last turn of the session the running backend's
	// conversation took part in (0: none since it started); resumed says
	// that it took up its earlier conversation (session/load or resume),
	// which holds the agent's own earlier turns. See briefing.
	heard   int64
	resumed bool
	// starts counts the backend's successful starts: a turn that ran on
	// start n updates heard only while it is still start n.
	starts int

	lastActive time.Time
	crashes    []time.Time
	restarts   int
	retire     bool // provider disabled or removed: stop when idle
	recycle    bool // launch spec changed: stop when idle
}

func (e *entry) stateLocked() string {
	if e.inUse && (e.state == StateIdle || e.state == StateStarting) {
		if e.state == StateStarting {
			return StateStarting
		}
		return StateBusy
	}
	return e.state
}

func (e *entry) warmLocked() bool {
	return e.state == StateStarting || e.state == StateIdle
}

// startErr is err of a start of agent, said to be one: the backend's own
// error names the start already, most do (after the sandbox's notes,
// when it denied the agent a path).
func startErr(agent string, err error) error {
	if strings.Contains(err.Error(), fmt.Sprintf("start agent %q: ", agent)) {
		return err
	}
	return fmt.Errorf("start agent %q: %w", agent, err)
}

// loginHint says how to log in agent, which refused to start with err
// until the user logs in: agentpool login, unless the agent offers no
// way to (then the command its own words name, if any).
func loginHint(agent string, err error) string {
	var ae *backends.AuthRequiredError
	if !errors.As(err, &ae) || !ae.NoMethod {
		return "log in with: agentpool login " + agent
	}
	if cmd := backends.LoginCommand(ae.Said()); cmd != "" {
		return fmt.Sprintf("it offers no login method to agentpool: log in with %s in your terminal, then retry", cmd)
	}
	return "it offers no login method to agentpool: log in as the agent says, then retry"
}

// sameSpec reports whether a and b launch the same agent, whatever
// their directories.
func sameSpec(a, b backends.Spec) bool { return specHash(a) == specHash(b) }

func specHash(s backends.Spec) string {
	s.Dir = ""
	b, _ := json.Marshal(s)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// acquire returns the warm backend of (s, agent) reserved for a turn, or
// reserves and starts a new one. It refuses at once when the agent cannot
// launch, keeps crashing, or the pool is full of busy backends (or prompts
// wait in the slot queue).
func (p *Pool) acquire(s *session, agent string) (*entry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acquireLocked(s, agent)
}

// acquireLocked is acquire with p.mu held.
func (p *Pool) acquireLocked(s *session, agent string) (*entry, error) {
	k := key{s.id, agent}
	if p.closing {
		return nil, fmt.Errorf("pool: %w", ErrClosed)
	}
	// A closing session gets no backend: Close marks it closed before it
	// stops the session's entries, and this check and the insertion of a
	// new entry share one hold of p.mu, so Close's stop sees every entry.
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("session %q: %w", s.id, ErrClosed)
	}
	e := p.entries[k]
	if e != nil && e.warmLocked() && !e.inUse {
		e.inUse = true
		return e, nil
	}
	if e != nil && e.inUse {
		return nil, fmt.Errorf("agent %q of session %q: %w", agent, s.id, ErrBusy)
	}
	spec, err := p.cfg.Resolver.Resolve(agent)
	if err != nil {
		return nil, fmt.Errorf("agent %q: %w", agent, err)
	}
	var crashes []time.Time
	restarts := 0
	lastErr := ""
	if e != nil {
		now := p.cfg.Now()
		// The crashes of another definition of the provider, or those
		// before a probe that succeeded, say nothing of the next start:
		// the user fixed the cause.
		var since time.Time
		if pr, ok := p.cfg.Resolver.(ProbeReporter); ok {
			since = pr.LastProbeOK(agent)
		}
		if sameSpec(e.spec, spec) {
			for _, t := range e.crashes {
				if now.Sub(t) < p.cfg.CrashWindow && t.After(since) {
					crashes = append(crashes, t)
				}
			}
		}
		restarts = e.restarts
		if e.state == StateCrashed {
			restarts++
		}
		if e.err != nil {
			lastErr = e.err.Error()
		}
	}
	if len(crashes) >= p.cfg.CrashLimit {
		wait := crashes[len(crashes)-p.cfg.CrashLimit].Add(p.cfg.CrashWindow).Sub(p.cfg.Now()).Round(time.Second)
		return nil, fmt.Errorf("%w: agent %q crashed %d times in %s in session %q; not restarting it (last error: %s); "+
			"once the cause is fixed, retry now after a probe that succeeds (agentpool providers refresh %s) or a change of the provider in providers.json, or in %s",
			ErrAgentFailing, agent, len(crashes), p.cfg.CrashWindow, s.id, lastErr, agent, wait)
	}
	if err := p.makeRoomLocked(); err != nil {
		return nil, err
	}
	return p.startEntryLocked(s, agent, spec, crashes, restarts, false), nil
}

// startEntryLocked adds the entry of (s, agent), which has none, and
// starts its backend in the background. The entry is reserved (in use)
// for the caller, unless it is a warm-up's (see warmup.go): then nobody
// holds it, and the first prompt takes it while it starts. The caller has
// checked that the pool and the session are open and that there is room.
func (p *Pool) startEntryLocked(s *session, agent string, spec backends.Spec, crashes []time.Time, restarts int, warmup bool) *entry {
	k := key{s.id, agent}
	s.mu.Lock()
	spec.Dir = s.wt.Path
	s.mu.Unlock()
	ne := &entry{key: k, sess: s, spec: spec, hash: specHash(spec), state: StateStarting, inUse: !warmup, warmup: warmup,
		started: make(chan struct{}), lastActive: p.cfg.Now(), crashes: crashes, restarts: restarts,
		early: p.takeEarlyLocked(k)}
	startCtx, cancel := context.WithCancel(p.ctx)
	ne.cancelStart = cancel
	p.entries[k] = ne
	p.wg.Add(1)
	go p.start(startCtx, ne)
	return ne
}

// Warm starts the backend of (session, agent) without running a turn, or
// does nothing if it is already warm. Concurrent calls share one start.
func (p *Pool) Warm(ctx context.Context, id, agent string) error {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return err
	}
	if agent == "" {
		s.mu.Lock()
		agent = s.rec.ActiveAgent
		s.mu.Unlock()
	}
	for {
		p.mu.Lock()
		e := p.entries[key{id, agent}]
		if e != nil && e.warmLocked() {
			p.mu.Unlock()
			_, err := p.waitStarted(ctx, e)
			return err
		}
		p.mu.Unlock()
		e, err = p.acquire(s, agent)
		if errors.Is(err, ErrBusy) {
			// Another caller reserved it between our look and acquire:
			// its start is shared with us on the next look.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return err
		}
		_, err = p.waitStarted(ctx, e)
		p.release(e)
		return err
	}
}

func (p *Pool) waitStarted(ctx context.Context, e *entry) (backends.Backend, error) {
	select {
	case <-e.started:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return e.backend, e.err
}

// start launches and starts e's backend, resuming the agent's previous
// session when one is recorded, and re-applies the recorded mode and
// config options. ctx ends when the entry is stopped (or the pool shuts
// down) while it starts: the backend's Start then fails and stops the
// process it spawned, and the entry ends stopped, not crashed.
func (p *Pool) start(ctx context.Context, e *entry) {
	defer p.wg.Done()
	defer e.cancelStart()
	s := e.sess
	agent := e.key.agent
	rec, recErr := p.cfg.Store.GetAgent(ctx, s.id, agent)
	resume := ""
	if recErr == nil {
		resume = rec.AgentSessionID
	}
	seed, forking := forkSeed{}, false
	if resume == "" {
		seed, forking = p.takeForkSeed(s.id, agent) // fork.go
	}
	starting := map[string]any{"provider": agent, "kind": e.spec.Kind, "resume": resume, "restarts": e.restarts}
	if forking {
		starting["fork_from"] = seed.from
	}
	if e.warmup {
		starting["warm_up"] = true
	}
	p.emit(s, backends.EventAgentStarting, agent, starting)
	s.mu.Lock()
	mcp := s.rec.MCPServers
	s.mu.Unlock()
	b, err := p.cfg.Launcher.Launch(LaunchRequest{
		Early:      e.early, // early.go: the launch owns it now
		Spec:       e.spec,
		Session:    s.id,
		Worktree:   s.wt,
		MCPServers: mcp,
		Emit: func(ev backends.Event) {
			ev, drops := boundUsage(ev)
			p.noteAdvertised(e, ev)
			p.publish(s, ev)
			p.noteUsage(e, ev, drops)
		},
		Permission: p.permissionFunc(s, agent, e.spec),
	})
	var info backends.Info
	if err == nil {
		p.mu.Lock()
		e.launched = b
		p.mu.Unlock()
		sctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
		if f, ok := b.(backends.ForkStarter); ok && forking {
			info, err = f.StartFork(sctx, seed.from)
		} else {
			info, err = b.Start(sctx, resume)
		}
		cancel()
		p.spawns.Add(1)
		if err == nil {
			if recErr == nil {
				p.reapply(ctx, s, agent, b, rec, info)
			}
			p.applyDefaults(ctx, s, agent, b, e.spec.Config, rec)
			info = b.Info()
			p.initAdvertised(e, b)
		}
		p.mu.Lock()
		e.launched = nil
		p.mu.Unlock()
	}
	now := p.cfg.Now()
	if err != nil {
		p.mu.Lock()
		stopped := e.state == StateStopping
		if stopped {
			// Stopped while starting (session closed, pool shut down):
			// not a crash, and nothing runs any more.
			e.err = fmt.Errorf("start agent %q: stopped while starting: %w", agent, ErrClosed)
			e.state = StateStopped
			if p.entries[e.key] == e {
				delete(p.entries, e.key)
			}
		}
		p.mu.Unlock()
		if stopped {
			p.logger.Info("agent stopped while starting", "session", s.id, "agent", agent, "err", err)
			p.putAgent(e, backends.Info{}, AgentClosed, rec)
			close(e.started)
			return
		}
		stage := "start"
		needsAuth := errors.Is(err, backends.ErrAuthRequired)
		if needsAuth {
			// Not a crash: it starts once the user has logged in.
			err = fmt.Errorf("%w; %s", startErr(agent, err), loginHint(agent, err))
			stage = "auth"
			if n, ok := p.cfg.Resolver.(AuthNoter); ok {
				n.AuthRequired(agent)
			}
		} else {
			err = startErr(agent, err)
		}
		p.mu.Lock()
		e.err = err
		e.state = StateCrashed
		if !needsAuth {
			e.crashes = append(e.crashes, now)
		}
		p.mu.Unlock()
		if !needsAuth {
			p.crashes.Add(1)
		}
		p.emit(s, backends.EventError, agent, map[string]string{"error": err.Error(), "stage": stage})
		p.putAgent(e, backends.Info{}, AgentCrashed, rec)
		close(e.started)
		return
	}
	p.mu.Lock()
	e.backend, e.info = b, info
	e.heard, e.resumed = 0, info.Resumed && !info.ContextLost
	e.starts++
	stopNow := p.closing || e.state == StateStopping
	if !stopNow {
		e.state = StateIdle
	}
	p.mu.Unlock()
	p.putAgent(e, info, AgentActive, rec)
	p.storeAdvertised(e)
	ready := map[string]any{
		"pid": info.PID, "agent_session_id": info.AgentSessionID, "resumed": info.Resumed, "resumed_by": info.ResumedBy, "context_lost": info.ContextLost,
		"agent_name": info.AgentName, "agent_version": info.AgentVersion, "modes": info.Modes, "current_mode": info.CurrentMode,
		"confinement": info.Confinement,
	}
	if len(info.MCPServers) > 0 {
		ready["mcp_servers"] = info.MCPServers // names only
	}
	p.emit(s, backends.EventAgentReady, agent, ready)
	p.wg.Add(1)
	go p.watch(e, b)
	close(e.started)
	if stopNow {
		p.stopEntry(context.Background(), e, "pool closing")
	}
}

// reapply restores the mode and config options the session had chosen.
func (p *Pool) reapply(ctx context.Context, s *session, agent string, b backends.Backend, rec AgentRecord, info backends.Info) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if rec.Mode != "" && rec.Mode != info.CurrentMode {
		if err := b.SetMode(ctx, rec.Mode); err != nil && !errors.Is(err, backends.ErrUnsupported) {
			p.emit(s, backends.EventError, agent, map[string]string{"error": fmt.Sprintf("re-apply mode %q: %v", rec.Mode, err)})
		}
	}
	ids := make([]string, 0, len(rec.ConfigOptions))
	for id := range rec.ConfigOptions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := b.SetConfigOption(ctx, id, rec.ConfigOptions[id]); err != nil && !errors.Is(err, backends.ErrUnsupported) {
			p.emit(s, backends.EventError, agent, map[string]string{"error": fmt.Sprintf("re-apply config option %q: %v", id, err)})
		}
	}
}

func (p *Pool) putAgent(e *entry, info backends.Info, status string, prev AgentRecord) {
	if e.sess.isSpare() {
		return // stored at adoption (see spares.go)
	}
	r := p.agentRecordOf(e, info, status, prev)
	// The record must be written even when the pool is shutting down: it
	// holds the agent session id a later daemon resumes.
	if err := p.cfg.Store.UpsertAgent(context.WithoutCancel(p.ctx), r); err != nil {
		p.logger.Warn("store agent", "session", r.Session, "agent", r.Agent, "err", err)
	}
}

// agentRecordOf is e's record with status, from info and what prev
// recorded.
func (p *Pool) agentRecordOf(e *entry, info backends.Info, status string, prev AgentRecord) AgentRecord {
	now := p.cfg.Now()
	r := AgentRecord{Session: e.key.session, Agent: e.key.agent, Kind: e.spec.Kind, Status: status, Restarts: e.restarts,
		SpecHash: e.hash, LastActiveAt: now, CreatedAt: now, Mode: prev.Mode, ConfigOptions: prev.ConfigOptions,
		AgentSessionID: prev.AgentSessionID}
	if info.PID != 0 {
		r.PID, r.PGID, r.StartTicks = info.PID, info.PGID, info.StartTicks
		r.AgentSessionID = info.AgentSessionID
		r.ResumeSupported = info.LoadSession || info.Sessions.Resume
	}
	return r
}

// watch waits for a backend's process to end and records how.
func (p *Pool) watch(e *entry, b backends.Backend) {
	defer p.wg.Done()
	<-b.Done()
	err := b.Err()
	p.mu.Lock()
	expected := e.state == StateStopping || err == nil
	if expected {
		e.state = StateStopped
		if p.entries[e.key] == e {
			delete(p.entries, e.key)
		}
	} else {
		e.state = StateCrashed
		e.err = err
		e.crashes = append(e.crashes, p.cfg.Now())
	}
	p.mu.Unlock()
	status := AgentClosed
	if !expected {
		status = AgentCrashed
		p.crashes.Add(1)
		p.logger.Warn("agent crashed", "session", e.key.session, "agent", e.key.agent, "err", err)
	}
	if err := p.setAgentStatus(e, status); err != nil {
		p.logger.Warn("store agent status", "session", e.key.session, "agent", e.key.agent, "err", err)
	}
}

func (p *Pool) setAgentStatus(e *entry, status string) error {
	r, err := p.cfg.Store.GetAgent(context.WithoutCancel(p.ctx), e.key.session, e.key.agent)
	if err != nil {
		return err
	}
	r.Status = status
	r.LastActiveAt = p.cfg.Now()
	return p.cfg.Store.UpsertAgent(context.WithoutCancel(p.ctx), r)
}

// release returns a backend after a turn; a retired or recycled one stops.
func (p *Pool) release(e *entry) {
	p.mu.Lock()
	e.inUse = false
	e.lastActive = p.cfg.Now()
	stop := (e.retire || e.recycle) && e.state == StateIdle
	p.serveQueueLocked() // a prompt waiting for a slot may evict e now
	p.mu.Unlock()
	if stop {
		p.stopEntry(context.Background(), e, "provider changed")
	}
}

// stopEntry stops one backend and waits for it. The entry may already be
// marked stopping (eviction and reaping mark it under the lock so it no
// longer counts as warm); one still starting has its start cut short,
// which stops the process the start spawned.
//
// The stop runs the backend's ladder (protocol close, SIGTERM, SIGKILL)
// within StopTimeout or until ctx ends, whichever comes first: when ctx
// ends the ladder jumps to SIGKILL. A caller whose stop must not be cut
// short by its own cancellation passes context.WithoutCancel. Once ctx
// has ended, stopEntry returns by killDeadline(ctx).
func (p *Pool) stopEntry(ctx context.Context, e *entry, reason string) {
	p.mu.Lock()
	if e.state == StateStopped || e.state == StateCrashed {
		if p.entries[e.key] == e && e.state == StateStopped {
			delete(p.entries, e.key)
		}
		p.mu.Unlock()
		return
	}
	e.state = StateStopping
	started := e.started
	p.mu.Unlock()
	e.cancelStart()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StopTimeout)
	defer cancel()
	if !p.awaitStart(ctx, e, started) {
		return
	}
	p.mu.Lock()
	b := e.backend
	p.mu.Unlock()
	if b == nil {
		return
	}
	p.logger.Info("stopping agent", "session", e.key.session, "agent", e.key.agent, "reason", reason)
	if sc, ok := b.(backends.SessionCloser); ok && reason == reasonSessionClosed {
		// Only a closing session ends the agent's own: an evicted or idle
		// agent keeps it, to be resumed.
		cctx, ccancel := context.WithTimeout(ctx, sessionCloseTimeout)
		err := sc.CloseSession(cctx)
		ccancel()
		if err != nil && !errors.Is(err, backends.ErrUnsupported) {
			p.logger.Info("agent did not close its session", "session", e.key.session, "agent", e.key.agent, "err", err)
		}
	}
	if err := b.Stop(ctx); err != nil {
		p.logger.Warn("stop agent", "session", e.key.session, "agent", e.key.agent, "err", err)
	}
}

// reasonSessionClosed is the stop reason of the agents of a session that
// closes: the one stop that ends the agent's own session too.
const reasonSessionClosed = "session closed"

// sessionCloseTimeout bounds an agent's session/close before it is stopped.
const sessionCloseTimeout = 3 * time.Second

// stopEntries stops, in parallel, the entries that match.
func (p *Pool) stopEntries(ctx context.Context, match func(*entry) bool, reason string) {
	p.mu.Lock()
	var list []*entry
	for _, e := range p.entries {
		if match(e) {
			list = append(list, e)
		}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range list {
		wg.Add(1)
		go func() { defer wg.Done(); p.stopEntry(ctx, e, reason) }()
	}
	wg.Wait()
}

// Backend returns the running backend of (session, agent), starting it if
// needed, for direct use such as attaching a person to a terminal agent.
// agent "" means the session's active agent. The backend stays owned by the
// pool: callers must not stop it.
func (p *Pool) Backend(ctx context.Context, id, agent string) (backends.Backend, error) {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return nil, err
	}
	if agent == "" {
		s.mu.Lock()
		agent = s.rec.ActiveAgent
		s.mu.Unlock()
	}
	if err := p.Warm(ctx, id, agent); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[key{id, agent}]
	if e == nil || e.backend == nil {
		return nil, fmt.Errorf("agent %q of session %q is not running: %w", agent, id, ErrNotFound)
	}
	e.lastActive = p.cfg.Now()
	return e.backend, nil
}
