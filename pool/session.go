package pool

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/permission"
)

// session is a loaded session. mu guards every field; it is held while an
// event gets its seq and is queued to the store, which appends it to the
// feed once it is durable, in queue order, so the store, the feed and
// every subscriber see the same order.
type session struct {
	id   string
	feed *Feed

	mu   sync.Mutex
	rec  SessionRecord
	wt   Worktree
	seq  int64
	turn *turnRun
	// last is the last turn runTurn ended, kept for a waiter that comes
	// after its end (a quick turn can end before its prompt's caller
	// waits): WaitTurn answers it without reading the store.
	last   *turnRun
	closed bool
	// spare marks a spare's session (see spares.go), which has no row in
	// the store: its events are dropped and its agent is not stored until
	// a Create adopts it. Written under Pool.mu and mu both.
	spare bool
	// moving marks a session that is leaving this host (Move) or that it
	// lost (Release): closed is set with it, to keep prompts and agents
	// out, but the session is not closed.
	moving bool
	// budget is the session's own budget as stored, and keys the number
	// of each turn a prompt carrying a key started, by key (see
	// sessionBudget, keyStarted).
	budget kept[backends.Budget]
	keys   kept[map[string]int64]
	// slowing follows the times its agent was held waiting for room in
	// the store's write queue (fair.go).
	slowing slowing
}

// state is what Merge and CommitWork check of s in one hold of its lock:
// whether it runs a turn (busy from the moment a prompt claims it, before
// its number is known) and which, whether it is closed, its worktree with
// its active agent, and its record.
func (s *session) state() (busy bool, turn int64, closed bool, wt Worktree, rec SessionRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turn != nil {
		busy, turn = true, s.turn.id
	}
	wt = s.wt
	wt.Agent = s.rec.ActiveAgent
	return busy, turn, s.closed, wt, s.rec
}

// isSpare says whether s is still a spare.
func (s *session) isSpare() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spare
}

// loadSession returns the in-memory session, loading it from the store.
func (p *Pool) loadSession(ctx context.Context, id string) (*session, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: session id is empty", ErrInvalid)
	}
	p.mu.Lock()
	if s := p.sessions[id]; s != nil {
		p.mu.Unlock()
		return s, nil
	}
	closing, forgotten := p.closing, p.forgotten
	p.mu.Unlock()
	if closing {
		return nil, fmt.Errorf("pool: %w", ErrClosed)
	}
	rec, err := p.cfg.Store.GetSession(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, &userError{msg: "no session " + id, err: fmt.Errorf("session %q: %w", id, err)}
	}
	if err != nil {
		return nil, fmt.Errorf("session %q: %w", id, err)
	}
	wt, err := p.cfg.Store.GetWorktree(ctx, id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("session %q worktree: %w", id, err)
	}
	next, err := p.cfg.Store.NextSeq(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("session %q events: %w", id, err)
	}
	if wt, err = p.loadHere(ctx, rec, wt); err != nil {
		return nil, err
	}
	var remembered []permission.Remembered
	if rec.Status != StatusClosed {
		if remembered, err = p.cfg.Store.RememberedPermissions(ctx, id); err != nil {
			return nil, fmt.Errorf("session %q remembered permissions: %w", id, err)
		}
	}
	s := &session{id: id, rec: rec, wt: wt, seq: next - 1, closed: rec.Status == StatusClosed}
	s.feed = newSessionFeed(p.cfg.RingSize, p.cfg.RingBytes, s.seq, p.storedEvents(id), &p.catchups)
	if s.closed {
		s.feed.Close(ErrClosed)
	}
	// A closed session is not kept, and one read open while a session was
	// forgotten may be stale: it is read again (see evict_sessions.go).
	p.mu.Lock()
	prev, stale := p.sessions[id], !s.closed && p.forgotten != forgotten
	if prev == nil && !stale && !s.closed {
		p.sessions[id] = s
		// Under p.mu: a load that lost the race does not overwrite what
		// the session's first load gave the broker and a person added.
		p.broker.Remember(id, remembered)
	}
	p.mu.Unlock()
	switch {
	case prev != nil:
		return prev, nil
	case stale:
		return p.loadSession(ctx, id)
	}
	return s, nil
}

// storedEvents reads a session's events from the store, for subscribers
// that fell behind its feed's ring. An event reaches the feed only after
// the store has committed it, so the store holds every event the feed has
// had, and there is nothing to wait for.
func (p *Pool) storedEvents(id string) backingSource {
	return func(ctx context.Context, after int64, limit int) ([]backends.Event, error) {
		// The store's errors name the session and the seq. A page is
		// bounded by bytes too, whatever the events' mean size said.
		return p.cfg.Store.EventsPage(ctx, id, after, limit, maxBackingBytes)
	}
}

// lifecycleDeliveryWait bounds how long the pool waits for the delivery of
// an event it waits on (session.created, session.closed, a turn's
// turn.ended; see awaitDelivered); a store that cannot write (a full disk)
// is not waited for longer.
const lifecycleDeliveryWait = 5 * time.Second

// publish gives ev its seq and session and queues it to the store; readers
// of the session's feed (and of the daemon-wide one) get it once the store
// has committed it, never before. It first waits for room in the store's
// write queue, outside the session's lock: an agent that produces events
// faster than the disk takes them is slowed down, while the session stays
// readable. session.created and session.closed are waited for until
// delivered (see lifecycleDeliveryWait): Create returns once the session's
// first event is on the streams, and Close ends the feed after its last.
func (p *Pool) publish(s *session, ev backends.Event) {
	p.publishLater(s, ev)()
}

// publishLater is publish up to the wait for delivery, which it returns
// for the caller to do once it has started what need not wait for it
// (see Create).
func (p *Pool) publishLater(s *session, ev backends.Event) (wait func()) {
	if ev.Time.IsZero() {
		ev.Time = p.cfg.Now()
	}
	if err := p.waitRoom(p.ctx, s, ev.Agent); err != nil { // fair.go
		p.logger.Debug("publish without waiting for room in the store's queue", "session", s.id, "err", err)
	}
	p.pace(p.ctx, s, len(ev.Data)) // fair.go
	var delivered chan struct{}
	if ev.Type == backends.EventSessionCreated || ev.Type == backends.EventSessionClosed {
		delivered = make(chan struct{})
	}
	s.mu.Lock()
	p.queueLocked(s, ev, delivered)
	s.mu.Unlock()
	p.published.Add(1)
	return func() {
		if delivered != nil && !p.awaitDelivered(delivered) {
			p.logger.Warn("event not yet written; going on without it", "session", s.id, "type", ev.Type)
		}
	}
}

// awaitDelivered waits until delivered is closed, at most
// lifecycleDeliveryWait, and reports whether it was. Someone waits for
// the event (Create for session.created, a prompt for its turn.ended), so
// the store's writer is asked not to linger for a fuller batch: it
// commits what is queued at once, which saves a waited prompt most of
// its time in a quiet pool. Other sessions' writes queued before are not
// waited for once it is delivered.
func (p *Pool) awaitDelivered(delivered <-chan struct{}) bool {
	select {
	case <-delivered:
		return true
	default:
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), lifecycleDeliveryWait)
	defer cancel()
	// Not a Flush: the writes queued before, another session's megabytes
	// among them, may be committed after this one (the store takes
	// sessions in turn, light ones first), and are not waited for.
	if err := p.cfg.Store.AwaitDelivery(ctx, delivered); err != nil {
		p.logger.Debug("wait for a waited event's delivery", "err", err)
	}
	select {
	case <-delivered:
		return true
	default:
		return false
	}
}

// publishLocked is publish with s.mu held; the caller counts the event in
// p.published. It does not wait for room in the store's queue beyond the
// store's AppendWait.
func (p *Pool) publishLocked(s *session, ev backends.Event) {
	p.queueLocked(s, ev, nil)
}

// queueLocked gives ev its seq, session and turn under s.mu and queues it
// to the store, which delivers it to the feeds once it is durable; the
// store calls each session's delivery hooks in the order of its appends,
// so every reader, of the session and daemon-wide, sees each session's
// events in seq order. delivered, if not nil, is closed after the delivery.
func (p *Pool) queueLocked(s *session, ev backends.Event, delivered chan struct{}) {
	p.appendLocked(s, ev, delivered, false)
}

// appendLocked is queueLocked; with past, the event is queued even when
// the store's queue is full (Store.AppendPast).
func (p *Pool) appendLocked(s *session, ev backends.Event, delivered chan struct{}, past bool) {
	if s.spare {
		// No session row to hold it: what a spare's agent says while it
		// starts is not kept (see spares.go).
		if delivered != nil {
			close(delivered)
		}
		return
	}
	if ev.Time.IsZero() {
		ev.Time = p.cfg.Now()
	}
	s.seq++
	ev.Seq = s.seq
	ev.Session = s.id
	if ev.Turn == 0 && s.turn != nil {
		ev.Turn = s.turn.id
	}
	if past {
		p.cfg.Store.AppendPast(ev, p.deliverTo(s, delivered))
		return
	}
	p.cfg.Store.Append(ev, p.deliverTo(s, delivered))
}

// deliverTo returns the store's commit hook for s's events: it appends the
// event to the session's feed and, for the types it carries, to the
// daemon-wide one, then closes delivered if set. It runs on the store's
// writer goroutine and never blocks.
func (p *Pool) deliverTo(s *session, delivered chan struct{}) func(backends.Event) {
	return func(ev backends.Event) {
		s.feed.Publish(ev)
		if globalType(ev.Type) {
			p.global.Publish(ev)
		}
		if delivered != nil {
			close(delivered)
		}
	}
}

func (p *Pool) emit(s *session, t backends.EventType, agent string, data any) {
	p.publish(s, backends.Event{Time: p.cfg.Now(), Type: t, Agent: agent, Data: backends.MustJSON(data)})
}

// globalType says which events the daemon-wide stream carries.
func globalType(t backends.EventType) bool {
	s := string(t)
	return strings.HasPrefix(s, "session.") || strings.HasPrefix(s, "agent.") || strings.HasPrefix(s, "permission.") || strings.HasPrefix(s, "spare.") ||
		t == backends.EventTurnStarted || t == backends.EventTurnEnded
}

// Create makes the session's worktree and row, and records its first agent.
// The agent is resolved now, so an unknown or disabled one is refused at once.
// Unless req.Warm is false, the agent then starts in the background (see
// warmup.go); how that start goes is on the session's stream, and never
// fails the Create.
func (p *Pool) Create(ctx context.Context, req CreateRequest) (Session, error) {
	if err := checkCreateHandoff(req); err != nil {
		return Session{}, err
	}
	sess, err := p.create(ctx, req, nil)
	if err == nil {
		p.createHandoff(sess.ID, req)
	}
	return sess, err
}

// CreatePrompt is Create followed by StartPrompt of text on the new
// session: err is the create's, and when it is nil the session exists
// whether its first turn started (t) or not (turnErr says why: a budget,
// a full queue). A session adopted from a spare has its first turn's row
// stored with its own, in one commit: its first prompt waits for one
// commit, not two.
func (p *Pool) CreatePrompt(ctx context.Context, req CreateRequest, text string) (sess Session, t Turn, turnErr, err error) {
	if text == "" {
		return Session{}, Turn{}, nil, fmt.Errorf("%w: text is empty", ErrInvalid)
	}
	if err := checkCreateHandoff(req); err != nil {
		return Session{}, Turn{}, nil, err
	}
	first := &firstPrompt{text: text}
	sess, err = p.create(ctx, req, first)
	if err != nil {
		return Session{}, Turn{}, nil, err
	}
	p.createHandoff(sess.ID, req)
	if !first.tried {
		first.turn, first.err = p.StartPrompt(ctx, PromptRequest{Session: sess.ID, Text: text})
	}
	if first.err == nil {
		sess.Busy, sess.Turn = true, first.turn.ID
	}
	return sess, first.turn, first.err, nil
}

// firstPrompt is the first prompt of a session CreatePrompt makes, and
// how it went when the create started it (tried).
type firstPrompt struct {
	text  string
	tried bool
	turn  Turn
	err   error
}

// create is Create; first, when not nil, is the session's first prompt,
// which the adoption of a spare starts (see adoptSpare).
func (p *Pool) create(ctx context.Context, req CreateRequest, first *firstPrompt) (Session, error) {
	if req.Repo == "" {
		return Session{}, fmt.Errorf("%w: repo is required", ErrInvalid)
	}
	if !filepath.IsAbs(req.Repo) && !strings.Contains(req.Repo, ":") {
		// A URL (scheme://… or host:path) is the worktrees' to check.
		return Session{}, fmt.Errorf("%w: repo %q is not an absolute path", ErrInvalid, req.Repo)
	}
	if req.Agent == "" {
		return Session{}, fmt.Errorf("%w: agent is required", ErrInvalid)
	}
	if err := req.MCPServers.Validate("mcp_servers"); err != nil {
		return Session{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	spec, err := p.cfg.Resolver.Resolve(req.Agent)
	if err != nil {
		return Session{}, fmt.Errorf("agent %q: %w", req.Agent, err)
	}
	if err := validAgentSession(req.AgentSession); err != nil {
		return Session{}, err
	}
	if err := p.validCreateBudget(req.Budget); err != nil {
		return Session{}, err
	}
	p.mu.Lock()
	closing := p.closing
	p.mu.Unlock()
	if closing {
		return Session{}, fmt.Errorf("pool: %w", ErrClosed)
	}
	if sp := p.takeSpare(ctx, req); sp != nil {
		return p.adoptSpare(ctx, req, sp, first, nil) // spares_adopt.go
	}
	p.wakeSpares() // a repository used now may want spares
	id := req.ID
	if id == "" {
		id = p.cfg.NewID()
	}
	if _, err := p.cfg.Store.GetSession(ctx, id); err == nil {
		return Session{}, fmt.Errorf("%w: session %q already exists", ErrInvalid, id)
	}
	waitEarly := func() Early { return nil }
	if req.warmOn() {
		// While the worktree is made (see early.go).
		waitEarly = p.launchEarly(spec, id)
	}
	wt, err := p.cfg.Worktrees.Create(ctx, id, req.Repo, req.BaseRef)
	early := waitEarly()
	defer func() {
		if early != nil {
			early.Close() // the create failed
		}
	}()
	if err != nil {
		return Session{}, fmt.Errorf("create worktree: %w", err)
	}
	now := p.cfg.Now()
	rec := SessionRecord{ID: id, Repo: wt.Repo, BaseRef: req.BaseRef, Title: req.Title, ActiveAgent: req.Agent, Status: StatusOpen, CreatedAt: now, UpdatedAt: now,
		MCPServers: req.MCPServers.Clone()}
	if err := p.cfg.Store.CreateSession(ctx, rec, wt); err != nil {
		// The worktree holds nothing yet: take it back.
		if _, rerr := p.cfg.Worktrees.Remove(context.WithoutCancel(ctx), wt, true); rerr != nil {
			p.logger.Warn("remove worktree of a session that could not be stored", "session", id, "err", rerr)
		}
		return Session{}, fmt.Errorf("store session: %w", err)
	}
	if req.AgentSession != "" {
		// The agent's first start takes this session up (see start).
		a := AgentRecord{Session: id, Agent: req.Agent, Kind: spec.Kind, AgentSessionID: req.AgentSession,
			Status: AgentIdle, LastActiveAt: now, CreatedAt: now}
		if err := p.cfg.Store.UpsertAgent(ctx, a); err != nil {
			return Session{}, fmt.Errorf("store the agent session to take up: %w", err)
		}
	}
	if req.Budget != nil && !req.Budget.IsZero() {
		if err := p.cfg.Usage.SetSessionBudget(ctx, id, *req.Budget); err != nil {
			return Session{}, fmt.Errorf("store the session's budget: %w", err)
		}
	}
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return Session{}, err
	}
	created := map[string]any{"repo": wt.Repo, "worktree": wt.Path, "branch": wt.Branch, "base_commit": wt.BaseCommit, "agent": req.Agent, "warm": req.warmOn()}
	if req.AgentSession != "" {
		created["agent_session"] = req.AgentSession
	}
	if req.Budget != nil && !req.Budget.IsZero() {
		created["budget"] = req.Budget
	}
	if len(req.MCPServers) > 0 {
		created["mcp_servers"] = req.MCPServers.Names() // names only: never a secret
	}
	// The setup and the agent's start begin while the store writes
	// session.created (their events come after it); Create returns once
	// it is written.
	written := p.publishLater(s, backends.Event{Time: p.cfg.Now(), Type: backends.EventSessionCreated, Agent: req.Agent, Data: backends.MustJSON(created)})
	p.startSetup(s) // setup.go
	if req.warmOn() {
		p.keepEarly(id, req.Agent, early)
		early = nil
		p.startWarmUp(s, req.Agent) // warmup.go
	}
	written()
	return p.get(ctx, id, true)
}

// Get returns a session with its live state.
func (p *Pool) Get(ctx context.Context, id string) (Session, error) {
	return p.get(ctx, id, false)
}

// get is Get; with own, the session's agents are listed without their
// memory (see backendsOf): a create answers without scanning every
// process of the system, which made creating N sessions cost N scans of
// N agents.
func (p *Pool) get(ctx context.Context, id string, own bool) (Session, error) {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return Session{}, err
	}
	running := p.backendsOf(id)
	if !own {
		running = p.Backends()
	}
	sess := p.describe(ctx, s, running)
	if sess.LastTurn, err = p.lastTurn(ctx, s); err != nil {
		return Session{}, err
	}
	if p.cfg.Usage != nil {
		u, err := p.SessionUsage(ctx, id)
		if err != nil {
			return Session{}, err
		}
		sess.Usage = &u
	}
	return sess, nil
}

// lastTurn is the number of s's latest turn, running or ended, 0 when it
// never had one: the running one, else the last one this pool ended, else
// the store's (a turn ended before a restart, or on another host).
func (p *Pool) lastTurn(ctx context.Context, s *session) (int64, error) {
	s.mu.Lock()
	switch {
	case s.turn != nil && s.turn.id > 0:
		defer s.mu.Unlock()
		return s.turn.id, nil
	case s.spare:
		s.mu.Unlock()
		return 0, nil
	}
	s.mu.Unlock()
	t, err := p.cfg.Store.LastTurn(ctx, s.id)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("last turn of session %q: %w", s.id, err)
	}
	return t.ID, nil
}

// List returns every session, newest first as the store orders them.
func (p *Pool) List(ctx context.Context) ([]Session, error) {
	recs, err := p.cfg.Store.ListSessions(ctx)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	out := make([]Session, 0, len(recs))
	live := p.Backends() // one /proc scan for the whole list
	self := p.host()
	for _, r := range recs {
		if self != "" && r.Host != "" && r.Host != self && r.Status != StatusClosed {
			// Owned by another host: described as stored, not loaded here.
			out = append(out, Session{ID: r.ID, Repo: r.Repo, BaseRef: r.BaseRef, Title: r.Title, ActiveAgent: r.ActiveAgent,
				Status: r.Status, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, MCPServers: r.MCPServers.Redact(), Host: r.Host})
			continue
		}
		s, err := p.loadSession(ctx, r.ID)
		if err != nil {
			p.logger.Warn("load session", "session", r.ID, "err", err)
			continue
		}
		out = append(out, p.describe(ctx, s, live))
	}
	return out, nil
}

// describe is the session with its live state; running is the pool's
// current Backends(), read once by the caller.
func (p *Pool) describe(ctx context.Context, s *session, running []AgentStatus) Session {
	s.mu.Lock()
	out := Session{
		ID: s.id, Repo: s.rec.Repo, BaseRef: s.rec.BaseRef, Title: s.rec.Title, ActiveAgent: s.rec.ActiveAgent,
		Status: s.rec.Status, Worktree: s.wt, CreatedAt: s.rec.CreatedAt, UpdatedAt: s.rec.UpdatedAt, LastSeq: s.seq,
		MCPServers: s.rec.MCPServers.Redact(), Host: p.host(),
	}
	if s.turn != nil {
		out.Busy, out.Turn = true, s.turn.id
	}
	s.mu.Unlock()
	live := map[string]bool{}
	for _, st := range running {
		if st.Session == s.id {
			out.Agents = append(out.Agents, st)
			live[st.Agent] = true
		}
	}
	if recs, err := p.cfg.Store.ListAgents(ctx, s.id); err == nil {
		for _, r := range recs {
			if live[r.Agent] {
				continue
			}
			out.Agents = append(out.Agents, AgentStatus{Session: s.id, Agent: r.Agent, Kind: r.Kind, State: StateStopped,
				LastActive: r.LastActiveAt, Restarts: r.Restarts, AgentSessionID: r.AgentSessionID, Mode: r.Mode})
		}
	}
	return out
}

// Close closes the session: it stops the session's backends and removes
// its worktree. Unless discard is set, uncommitted work is committed to the
// session's branch first, which is kept.
//
// Close is atomic with respect to prompts. Its first step marks the
// session closed in the same hold of the session's lock in which it reads
// the running turn, and StartPrompt checks and claims the turn in one hold
// too: a prompt either came first, and Close cancels its turn (the
// protocol's way, then after closeTurnGrace by stopping the agent) and
// waits for the turn to end before the worktree goes, or it gets
// ErrClosed. No backend of the session outlives Close: no new one can
// start once the session is marked closed, and every one there is then
// stopped, one still starting included.
//
// If ctx ends while the turn winds down, or the worktree cannot be
// removed, Close fails and the session stays open (its agents stopped;
// they start again on the next prompt), so Close can be called again.
func (p *Pool) Close(ctx context.Context, id string, discard bool) (CloseResult, error) {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return CloseResult{}, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return CloseResult{}, fmt.Errorf("session %q: %w", id, ErrClosed)
	}
	s.closed = true
	tr, wt := s.turn, s.wt
	wt.Agent = s.rec.ActiveAgent
	s.mu.Unlock()
	reopen := func() {
		s.mu.Lock()
		s.closed = false
		s.mu.Unlock()
	}
	p.broker.CancelSession(id)
	if tr != nil {
		cancelTurns(ctx, []*turnRun{tr}, closeTurnGrace)
	}
	// The stops finish even if the caller goes away.
	p.stopEntries(context.WithoutCancel(ctx), func(e *entry) bool { return e.key.session == id }, reasonSessionClosed)
	if tr != nil {
		select {
		case <-tr.done:
		case <-ctx.Done():
			reopen()
			return CloseResult{}, fmt.Errorf("close session %q: waiting for its turn to end: %w", id, ctx.Err())
		}
	}
	res, err := p.cfg.Worktrees.Remove(ctx, wt, discard)
	if err != nil {
		reopen()
		return CloseResult{}, fmt.Errorf("close session %q: remove worktree (nothing was discarded): %w", id, err)
	}
	if err := p.cfg.Store.MarkWorktreeRemoved(ctx, id); err != nil {
		p.logger.Warn("mark worktree removed", "session", id, "err", err)
	}
	if err := p.cfg.Store.UpdateSessionStatus(ctx, id, StatusClosed); err != nil {
		p.logger.Warn("mark session closed", "session", id, "err", err)
	}
	p.broker.Forget(id)
	if err := p.cfg.Store.ForgetPermissions(ctx, id); err != nil {
		p.logger.Warn("forget remembered permission answers", "session", id, "err", err)
	}
	p.emit(s, backends.EventSessionClosed, "", map[string]any{"worktree": res, "discard": discard})
	// Every entry of the session has been stopped: forget those whose
	// process is gone (a stopping one is forgotten by its watch when its
	// process has been reaped; until then Shutdown can still reach it).
	p.mu.Lock()
	for k, e := range p.entries {
		if k.session == id && (e.state == StateStopped || e.state == StateCrashed) {
			delete(p.entries, k)
		}
	}
	delete(p.forkSeeds, id)
	p.mu.Unlock()
	s.mu.Lock()
	s.rec.Status = StatusClosed
	s.feed.Close(ErrClosed) // after session.closed: subscribers read it, then end
	s.mu.Unlock()
	p.forgetClosed(s) // its memory goes with its last subscriber
	return CloseResult{Session: id, Worktree: res}, nil
}

// Subscribe returns a subscription to the session's events with seq >
// after: the stored ones first, then each new one, with no gap and no
// duplicate whatever the timing. A subscriber is never dropped: one that
// falls behind the in-memory ring reads the store. The subscription ends
// with ErrClosed after the last event of a closed session (or of the pool
// at Shutdown).
func (p *Pool) Subscribe(ctx context.Context, id string, after int64) (*Subscription, error) {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.feed.Subscribe(after), nil
}

// SubscribeAll returns the daemon-wide stream: session, agent, turn
// start/end and permission events of every session, from now on. A
// subscriber that falls more than the stream's ring behind ends with
// ErrSlowSubscriber.
func (p *Pool) SubscribeAll() *Subscription {
	return p.global.subscribeNow()
}

// maxAgentSessionID bounds the length of an agent session id a client
// names.
const maxAgentSessionID = 512

// validAgentSession checks the agent session id a create request names:
// it goes to the agent as it is, so it must be printable text of a
// reasonable length.
func validAgentSession(id string) error {
	if len(id) > maxAgentSessionID {
		return fmt.Errorf("%w: agent_session is longer than %d bytes", ErrInvalid, maxAgentSessionID)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: agent_session %q holds a control character", ErrInvalid, id)
		}
	}
	return nil
}
