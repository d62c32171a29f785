package pool

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/agentpool/agentpool/backends"
)

// session is a loaded session. mu guards every field; it is held while an
// event gets its seq, is queued to the store and is appended to the feed,
// so the store, the feed and every subscriber see the same order.
type session struct {
	id   string
	feed *Feed

	mu     sync.Mutex
	rec    SessionRecord
	wt     Worktree
	seq    int64
	turn   *turnRun
	closed bool
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
	closing := p.closing
	p.mu.Unlock()
	if closing {
		return nil, fmt.Errorf("pool: %w", ErrClosed)
	}
	rec, err := p.cfg.Store.GetSession(ctx, id)
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
	s := &session{id: id, rec: rec, wt: wt, seq: next - 1, closed: rec.Status == StatusClosed}
	s.feed = newSessionFeed(p.cfg.RingSize, s.seq, p.storedEvents(id), &p.catchups)
	if s.closed {
		s.feed.Close(ErrClosed)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev := p.sessions[id]; prev != nil {
		return prev, nil
	}
	p.sessions[id] = s
	return s, nil
}

// storedEvents reads a session's events from the store, for subscribers
// that fell behind its feed's ring. The store writes events in order, so
// a full batch needs nothing newer; a short one may lack events still
// queued, and is read again after a flush, which makes the store hold
// every event published before.
func (p *Pool) storedEvents(id string) backingSource {
	return func(ctx context.Context, after int64, limit int) ([]backends.Event, error) {
		// The store's errors name the session and the seq.
		evs, err := p.cfg.Store.Events(ctx, id, after, limit)
		if err != nil || len(evs) == limit {
			return evs, err
		}
		if err := p.cfg.Store.Flush(ctx); err != nil {
			return nil, err
		}
		return p.cfg.Store.Events(ctx, id, after, limit)
	}
}

// publish gives ev its seq and session, queues it to the store and appends
// it to the session's feed (and the daemon-wide one).
func (p *Pool) publish(s *session, ev backends.Event) {
	if ev.Time.IsZero() {
		ev.Time = p.cfg.Now()
	}
	s.mu.Lock()
	p.publishLocked(s, ev)
	s.mu.Unlock()
	p.published.Add(1)
}

// publishLocked is publish with s.mu held; the caller counts the event in
// p.published.
func (p *Pool) publishLocked(s *session, ev backends.Event) {
	if ev.Time.IsZero() {
		ev.Time = p.cfg.Now()
	}
	s.seq++
	ev.Seq = s.seq
	ev.Session = s.id
	if ev.Turn == 0 && s.turn != nil {
		ev.Turn = s.turn.id
	}
	p.cfg.Store.Append(ev)
	s.feed.Publish(ev)
	// Still under the session's lock, so that the daemon-wide stream has
	// each session's events in their order too.
	if globalType(ev.Type) {
		p.global.Publish(ev)
	}
}

func (p *Pool) emit(s *session, t backends.EventType, agent string, data any) {
	p.publish(s, backends.Event{Time: p.cfg.Now(), Type: t, Agent: agent, Data: backends.MustJSON(data)})
}

// globalType says which events the daemon-wide stream carries.
func globalType(t backends.EventType) bool {
	s := string(t)
	return strings.HasPrefix(s, "session.") || strings.HasPrefix(s, "agent.") || strings.HasPrefix(s, "permission.") ||
		t == backends.EventTurnStarted || t == backends.EventTurnEnded
}

// Create makes the session's worktree and row, and records its first agent.
// The agent is resolved now, so an unknown or disabled one is refused at once.
func (p *Pool) Create(ctx context.Context, req CreateRequest) (Session, error) {
	if req.Repo == "" {
		return Session{}, fmt.Errorf("%w: repo is required", ErrInvalid)
	}
	if !filepath.IsAbs(req.Repo) {
		return Session{}, fmt.Errorf("%w: repo %q is not an absolute path", ErrInvalid, req.Repo)
	}
	if req.Agent == "" {
		return Session{}, fmt.Errorf("%w: agent is required", ErrInvalid)
	}
	if _, err := p.cfg.Resolver.Resolve(req.Agent); err != nil {
		return Session{}, fmt.Errorf("agent %q: %w", req.Agent, err)
	}
	p.mu.Lock()
	closing := p.closing
	p.mu.Unlock()
	if closing {
		return Session{}, fmt.Errorf("pool: %w", ErrClosed)
	}
	id := req.ID
	if id == "" {
		id = p.cfg.NewID()
	}
	if _, err := p.cfg.Store.GetSession(ctx, id); err == nil {
		return Session{}, fmt.Errorf("%w: session %q already exists", ErrInvalid, id)
	}
	wt, err := p.cfg.Worktrees.Create(ctx, id, req.Repo, req.BaseRef)
	if err != nil {
		return Session{}, fmt.Errorf("create worktree: %w", err)
	}
	now := p.cfg.Now()
	rec := SessionRecord{ID: id, Repo: wt.Repo, BaseRef: req.BaseRef, Title: req.Title, ActiveAgent: req.Agent, Status: StatusOpen, CreatedAt: now, UpdatedAt: now}
	if err := p.cfg.Store.CreateSession(ctx, rec); err != nil {
		// The worktree holds nothing yet: take it back.
		if _, rerr := p.cfg.Worktrees.Remove(context.WithoutCancel(ctx), wt, true); rerr != nil {
			p.logger.Warn("remove worktree of a session that could not be stored", "session", id, "err", rerr)
		}
		return Session{}, fmt.Errorf("store session: %w", err)
	}
	if err := p.cfg.Store.PutWorktree(ctx, wt); err != nil {
		return Session{}, fmt.Errorf("store worktree: %w", err)
	}
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return Session{}, err
	}
	p.emit(s, backends.EventSessionCreated, req.Agent, map[string]any{"repo": wt.Repo, "worktree": wt.Path, "branch": wt.Branch, "base_commit": wt.BaseCommit, "agent": req.Agent})
	return p.Get(ctx, id)
}

// Get returns a session with its live state.
func (p *Pool) Get(ctx context.Context, id string) (Session, error) {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return Session{}, err
	}
	return p.describe(ctx, s, p.Backends()), nil
}

// List returns every session, newest first as the store orders them.
func (p *Pool) List(ctx context.Context) ([]Session, error) {
	recs, err := p.cfg.Store.ListSessions(ctx)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	out := make([]Session, 0, len(recs))
	live := p.Backends() // one /proc scan for the whole list
	for _, r := range recs {
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

// Close stops the session's backends (cancelling a running turn first) and
// removes its worktree. Unless discard is set, uncommitted work is
// committed to the session's branch first, which is kept.
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
	tr := s.turn
	s.mu.Unlock()
	if tr != nil {
		tr.requestCancel(ctx)
		select {
		case <-tr.done:
		case <-ctx.Done():
			return CloseResult{}, fmt.Errorf("close session %q: waiting for its turn: %w", id, ctx.Err())
		}
	}
	p.broker.CancelSession(id)
	p.stopEntries(ctx, func(e *entry) bool { return e.key.session == id }, "session closed")
	res, err := p.cfg.Worktrees.Remove(ctx, s.wt, discard)
	if err != nil {
		return CloseResult{}, fmt.Errorf("close session %q: remove worktree (nothing was discarded): %w", id, err)
	}
	if err := p.cfg.Store.MarkWorktreeRemoved(ctx, id); err != nil {
		p.logger.Warn("mark worktree removed", "session", id, "err", err)
	}
	if err := p.cfg.Store.UpdateSessionStatus(ctx, id, StatusClosed); err != nil {
		p.logger.Warn("mark session closed", "session", id, "err", err)
	}
	p.broker.Forget(id)
	p.emit(s, backends.EventSessionClosed, "", map[string]any{"worktree": res, "discard": discard})
	p.mu.Lock()
	for k, e := range p.entries {
		if k.session == id && e.state != StateStopping {
			delete(p.entries, k)
		}
	}
	p.mu.Unlock()
	s.mu.Lock()
	s.closed = true
	s.rec.Status = StatusClosed
	s.feed.Close(ErrClosed) // after session.closed: subscribers read it, then end
	s.mu.Unlock()
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
