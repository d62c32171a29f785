package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/agentpool/agentpool/backends"
)

// Sessions owned by hosts. When several daemons (hosts) share the store,
// each open session is owned by one of them through a lease that the store
// fences: a host writes for a session only while it holds its lease. The
// pool of a host loads, prompts and serves only the sessions it holds;
// requests for the others are forwarded to their owner before they reach
// it. A session changes hands three ways:
//
//   - Move hands it over: its agents stop, its worktree is checkpointed
//     and pushed to its repository's remote, the lease goes to the other
//     host, and the local worktree is removed (nothing is lost);
//   - another host takes it over when its owner died and the lease
//     expired (failover, outside the pool; work after the last pushed
//     checkpoint stays on the dead host);
//   - this host loses it (it could not renew the lease in time, or another
//     host took it over): Release stops its agents and drops it from
//     memory without writing anything.
//
// The new owner makes the session's worktree on its first load, from what
// the old owner last pushed (see loadHere).

// ErrNotOwner is (wrapped in) the error of a call about a session that
// another host owns.
var ErrNotOwner = errors.New("session is owned by another host")

// ErrMoved ends the subscriptions of a session that left this host.
var ErrMoved = errors.New("session moved to another host")

// reasonSessionMoved is the stop reason of the agents of a session that
// left this host.
const reasonSessionMoved = "session moved to another host"

// Leases is what the pool needs of session leases when several hosts
// share its store (Config.Leases; nil for one host alone).
type Leases interface {
	// Host is this host's id.
	Host() string
	// Hold makes sure this host owns the open session (learning the
	// lease's epoch after a hand-over); an error wrapping ErrNotOwner,
	// naming the owner, when another host does.
	Hold(ctx context.Context, session string) error
	// HandOver gives the lease of session, which this host holds, to host
	// to, and returns the events it stored with it (session.moved).
	HandOver(ctx context.Context, session, to, reason string) ([]backends.Event, error)
}

// Mover is what Move needs of the worktrees beyond Worktrees.
type Mover interface {
	// Movable says whether a session of repo can continue on another
	// host: its repository is given by URL (a local checkout is not).
	Movable(ctx context.Context, repo string) bool
	// Handoff checkpoints wt and pushes its branch and checkpoint to the
	// remote, failing when the push does.
	Handoff(ctx context.Context, wt Worktree) error
	// Continue makes on this host the worktree of a session another host
	// made and pushed (see worktree.Manager.Continue).
	Continue(ctx context.Context, wt Worktree) (Worktree, error)
}

// MoveResult says where a session went.
type MoveResult struct {
	Session string `json:"session"`
	From    string `json:"from"`
	To      string `json:"to"`
	// Already: the session was on To when asked (a move sent again after
	// its answer was lost, or asked of the host it is on).
	Already bool `json:"already,omitempty"`
}

// host returns this host's id, "" when the pool runs alone.
func (p *Pool) host() string {
	if p.cfg.Leases == nil {
		return ""
	}
	return p.cfg.Leases.Host()
}

// loadHere makes sure that this host owns the open session rec, and
// that wt, its worktree, is on this host: a session handed over or taken
// over by this host gets its worktree made from what its previous owner
// pushed, and recorded. It returns the worktree to use.
func (p *Pool) loadHere(ctx context.Context, rec SessionRecord, wt Worktree) (Worktree, error) {
	if p.cfg.Leases == nil || rec.Status == StatusClosed {
		return wt, nil
	}
	if err := p.cfg.Leases.Hold(ctx, rec.ID); err != nil {
		return wt, &userError{msg: fmt.Sprintf("session %s is owned by another host: ask that host, or any host of the pool, which forwards", rec.ID),
			err: fmt.Errorf("session %q: %w: %w", rec.ID, ErrNotOwner, err)}
	}
	self := p.cfg.Leases.Host()
	mv, ok := p.cfg.Worktrees.(Mover)
	// A worktree recorded here that is gone (this host handed the session
	// away, and it came back by a take-over) is made again from the
	// remote, as another host's would be.
	gone := func(w Worktree) bool {
		if w.Path == "" || w.Host != self || !ok || !mv.Movable(ctx, rec.Repo) {
			return false
		}
		_, err := os.Lstat(w.Path)
		return errors.Is(err, os.ErrNotExist)
	}
	if wt.Path == "" || wt.Host == "" || (wt.Host == self && !gone(wt)) {
		return wt, nil
	}
	if !ok {
		return wt, fmt.Errorf("session %q: its worktree is on host %s and this host cannot continue it", rec.ID, wt.Host)
	}
	// One continue at a time: two loads of the session must not both make
	// its worktree. The row is read again under the lock.
	p.moveMu.Lock()
	defer p.moveMu.Unlock()
	cur, err := p.cfg.Store.GetWorktree(ctx, rec.ID)
	if err != nil {
		return wt, fmt.Errorf("session %q worktree: %w", rec.ID, err)
	}
	if cur.Host == self && !gone(cur) {
		return cur, nil
	}
	from := cur.Host
	nwt, err := mv.Continue(ctx, cur)
	if err != nil {
		return wt, fmt.Errorf("session %q: continue its worktree from host %s: %w", rec.ID, from, err)
	}
	nwt.Host = self
	if err := p.cfg.Store.PutWorktree(ctx, nwt); err != nil {
		return wt, fmt.Errorf("session %q: record its worktree on this host: %w", rec.ID, err)
	}
	p.logger.Info("session continued on this host", "session", rec.ID, "from", from, "worktree", nwt.Path)
	return nwt, nil
}

// Move hands session id over to host to: it must be idle (ErrBusy
// otherwise: wait for its turn's end, or cancel it), and its repository
// given by URL. Its agents stop, its worktree is checkpointed and pushed,
// the lease goes to to, and its worktree here is removed; the subscribers
// here get session.moved and then end with ErrMoved. If any step before
// the hand-over fails, the session stays here, as it was. reason is
// "move" or "drain".
func (p *Pool) Move(ctx context.Context, id, to, reason string) (MoveResult, error) {
	if p.cfg.Leases == nil {
		return MoveResult{}, &userError{msg: "this daemon runs alone: there is no other host to move a session to",
			err: fmt.Errorf("move session %q: %w: no hosts", id, ErrInvalid)}
	}
	self := p.cfg.Leases.Host()
	if to == self {
		// Already here: a move resent after a forward was cut reaches the
		// host it went to. The session must be here and open.
		s, err := p.loadSession(ctx, id)
		if err != nil {
			return MoveResult{}, err
		}
		s.mu.Lock()
		closed := s.closed && !s.moving
		s.mu.Unlock()
		if closed {
			return MoveResult{}, fmt.Errorf("session %q: %w", id, ErrClosed)
		}
		return MoveResult{Session: id, From: self, To: self, Already: true}, nil
	}
	if to == "" {
		return MoveResult{}, &userError{msg: "name another host of the pool to move the session to (see `agentpool hosts`)",
			err: fmt.Errorf("move session %q to %q: %w: host", id, to, ErrInvalid)}
	}
	mv, ok := p.cfg.Worktrees.(Mover)
	if !ok {
		return MoveResult{}, fmt.Errorf("move session %q: %w: worktrees cannot move", id, ErrInvalid)
	}
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return MoveResult{}, err
	}
	s.mu.Lock()
	switch {
	case s.closed && s.moving:
		s.mu.Unlock()
		return MoveResult{}, fmt.Errorf("session %q is already moving: %w", id, ErrBusy)
	case s.closed:
		s.mu.Unlock()
		return MoveResult{}, fmt.Errorf("session %q: %w", id, ErrClosed)
	case s.turn != nil:
		n := s.turn.id
		s.mu.Unlock()
		return MoveResult{}, &userError{msg: fmt.Sprintf("session %s is running turn %d: wait for its end (or cancel it), then move it", id, n),
			err: fmt.Errorf("move session %q: turn %d: %w", id, n, ErrBusy)}
	}
	wt, repo := s.wt, s.rec.Repo
	wt.Agent = s.rec.ActiveAgent
	// Closed to prompts and new agents while it moves (see StartPrompt
	// and acquireLocked).
	s.closed, s.moving = true, true
	s.mu.Unlock()
	reopen := func() {
		s.mu.Lock()
		s.closed, s.moving = false, false
		s.mu.Unlock()
	}
	if !mv.Movable(ctx, repo) {
		reopen()
		return MoveResult{}, &userError{msg: fmt.Sprintf("session %s works on a local repository (%s): only a session whose repository is given by URL can continue on another host", id, repo),
			err: fmt.Errorf("move session %q: %w: local repository", id, ErrConflict)}
	}
	p.broker.CancelSession(id)
	p.stopEntries(context.WithoutCancel(ctx), func(e *entry) bool { return e.key.session == id }, reasonSessionMoved)
	if err := mv.Handoff(ctx, wt); err != nil {
		reopen()
		return MoveResult{}, fmt.Errorf("move session %q: push its work (it stays on this host): %w", id, err)
	}
	evs, err := p.cfg.Leases.HandOver(ctx, id, to, reason)
	if err != nil {
		reopen()
		return MoveResult{}, fmt.Errorf("move session %q to host %s (it stays on this host): %w", id, to, err)
	}
	// The work is on the remote and the session on the other host: the
	// worktree here goes, with what git keeps of it here.
	if _, err := p.cfg.Worktrees.Remove(context.WithoutCancel(ctx), wt, true); err != nil {
		p.logger.Warn("remove the worktree of a session moved away", "session", id, "path", wt.Path, "err", err)
	}
	p.leave(s, evs)
	p.logger.Info("session moved", "session", id, "from", self, "to", to, "reason", reason)
	return MoveResult{Session: id, From: self, To: to}, nil
}

// Release drops the sessions this host no longer owns (its lease was lost:
// not renewed in time, or taken over by another host): their turns are
// cancelled, their agents stopped and their subscribers ended with
// ErrMoved. Nothing is written to the store, which refuses this host's
// writes for them anyway.
func (p *Pool) Release(ctx context.Context, ids []string, reason string) {
	for _, id := range ids {
		p.mu.Lock()
		s := p.sessions[id]
		p.mu.Unlock()
		if s == nil {
			continue
		}
		s.mu.Lock()
		s.closed, s.moving = true, true
		tr := s.turn
		s.mu.Unlock()
		if tr != nil {
			tr.cancel()
		}
		p.broker.CancelSession(id)
		p.stopEntries(context.WithoutCancel(ctx), func(e *entry) bool { return e.key.session == id }, reasonSessionMoved)
		p.leave(s, nil)
		p.logger.Warn("session released: this host no longer owns it", "session", id, "reason", reason)
	}
}

// leave delivers evs (committed events of s: its session.moved) to s's
// subscribers, ends them with ErrMoved and drops s from memory.
func (p *Pool) leave(s *session, evs []backends.Event) {
	sort.Slice(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
	s.mu.Lock()
	for _, ev := range evs {
		if ev.Seq > s.seq {
			s.seq = ev.Seq
			s.feed.Publish(ev)
		}
	}
	s.feed.Close(ErrMoved)
	s.mu.Unlock()
	p.mu.Lock()
	if p.sessions[s.id] == s {
		delete(p.sessions, s.id)
		p.forgotten++
		// Its remembered answers stay in the store for its next host.
		p.broker.Forget(s.id)
	}
	for k, e := range p.entries {
		if k.session == s.id && (e.state == StateStopped || e.state == StateCrashed) {
			delete(p.entries, k)
		}
	}
	p.mu.Unlock()
}

// Owned lists the open sessions this host has in memory: those the
// cluster releases when it cannot renew their leases in time.
func (p *Pool) Owned() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.sessions))
	for id, s := range p.sessions {
		s.mu.Lock()
		open := !s.closed && !s.spare
		s.mu.Unlock()
		if open {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}
