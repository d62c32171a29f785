package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// EventSessionForked is the event that says a session was forked from
// another: the fork's stream has it right after the history it copied
// and its own session.created. Data: from (the session forked), turn (the
// turn it was forked at; 0 for the session's state when forked), commit
// and tree (where its worktree started), events and turns (how many were
// copied).
const EventSessionForked backends.EventType = "session.forked"

// ForkRequest asks for a fork of a session.
type ForkRequest struct {
	// Session is the session to fork.
	Session string
	// Agent is the fork's first agent ("": the session's active one).
	Agent string
	// Turn forks at the end of that turn (its checkpoint, and the history
	// up to it); 0 forks the session as it is now, uncommitted changes
	// included.
	Turn int64
	// Title is the fork's title ("": "fork of " the session's).
	Title string
}

// Forker is what Worktrees must also be for Fork: a reader of a
// worktree's live state that leaves it untouched.
type Forker interface {
	// Snap returns the tree of the worktree's whole state (what a
	// checkpoint would hold) and the commit its HEAD names, without
	// touching its files, index, HEAD or branch and without anchoring a
	// checkpoint.
	Snap(ctx context.Context, wt Worktree) (Snapshot, error)
}

// Snapshot is a worktree's state as Forker.Snap read it.
type Snapshot struct {
	Tree, Head string
}

// HistoryCopier is what Store must also be for Fork: it copies a
// session's turns and events into another session, in one transaction.
type HistoryCopier interface {
	// CopyHistory copies into to, which has no event or turn yet, the
	// ended turns of from numbered up to turn (keeping their numbers)
	// and its events (renumbered from 1, in order) but those of later
	// turns; with atTurn, none after turn's last event either. It returns
	// how many events and turns it copied.
	CopyHistory(ctx context.Context, from, to string, turn int64, atTurn bool) (events, turns int64, err error)
}

// Fork makes a new session from req.Session: its worktree, on its own
// branch, starts at the session's state now (uncommitted changes, new
// untracked files and deletions included; ignored files and those a
// setup copied are not) or at the end of turn req.Turn, and its stream
// and turns start with the session's history (up to that turn) copied,
// with the fork's own seqs, followed by its session.created and an
// EventSessionForked. Its agent then starts as for Create; the briefing
// of an agent that never spoke in a session with turns tells it the
// story.
//
// The session forked is read, never changed: its worktree is read through
// a copy of its index, and no lock its turns take is held while the copy
// is made, so a running turn goes on undisturbed (the fork gets its files
// as they are at that moment, and the history up to its last ended turn).
//
// Errors: an unknown session (as Get), a closed one (ErrClosed), a turn
// that does not exist or has not ended (ErrInvalid, naming it), an agent
// the registry refuses. A failed Fork leaves nothing: its worktree,
// branch and rows are removed.
func (p *Pool) Fork(ctx context.Context, req ForkRequest) (Session, error) {
	forker, ok := p.cfg.Worktrees.(Forker)
	if !ok {
		return Session{}, fmt.Errorf("fork: %w: the worktree manager cannot read a worktree's state", ErrInvalid)
	}
	copier, ok := p.cfg.Store.(HistoryCopier)
	if !ok {
		return Session{}, fmt.Errorf("fork: %w: the store cannot copy a session's history", ErrInvalid)
	}
	if req.Turn < 0 {
		return Session{}, &fieldError{field: "turn", err: fmt.Errorf("%w: turn %d: a turn is numbered from 1", ErrInvalid, req.Turn)}
	}
	s, err := p.loadSession(ctx, req.Session)
	if err != nil {
		return Session{}, err
	}
	_, running, closed, src, rec := s.state()
	if closed {
		return Session{}, fmt.Errorf("fork session %q: %w", s.id, ErrClosed)
	}
	agent := req.Agent
	if agent == "" {
		agent = rec.ActiveAgent
	}
	if _, err := p.cfg.Resolver.Resolve(agent); err != nil {
		return Session{}, &fieldError{field: "agent", err: fmt.Errorf("agent %q: %w", agent, err)}
	}
	turns, err := p.cfg.Store.ListTurns(ctx, s.id)
	if err != nil {
		return Session{}, fmt.Errorf("fork session %q: %w", s.id, err)
	}
	// through is the last turn copied: req.Turn, or the last one ended.
	var through int64
	var at *Turn
	for i := range turns {
		t := &turns[i]
		switch {
		case req.Turn > 0 && t.ID == req.Turn:
			at = t
		case req.Turn == 0 && t.EndedAt != nil && t.ID != running && t.ID > through:
			through = t.ID
		}
	}
	var base, tree string
	if req.Turn > 0 {
		switch {
		case at == nil:
			return Session{}, &fieldError{field: "turn", err: fmt.Errorf("%w: turn %d: session %s has %s", ErrInvalid, req.Turn, s.id, countTurns(len(turns)))}
		case at.EndedAt == nil || at.ID == running:
			return Session{}, &fieldError{field: "turn", err: fmt.Errorf("%w: turn %d of session %s has not ended", ErrInvalid, req.Turn, s.id)}
		case at.CheckpointAfter == "":
			return Session{}, &fieldError{field: "turn", err: fmt.Errorf("%w: turn %d of session %s has no checkpoint after it", ErrInvalid, req.Turn, s.id)}
		}
		// The turn's checkpoint is a tree: the fork's branch starts at the
		// session's base, with the work up to the turn uncommitted on it.
		through, base, tree = req.Turn, src.BaseCommit, at.CheckpointAfter
	} else {
		snap, err := forker.Snap(ctx, src)
		if err != nil {
			return Session{}, fmt.Errorf("fork session %q: read its worktree: %w", s.id, err)
		}
		base, tree = snap.Head, snap.Tree
		if base == "" {
			base = src.BaseCommit
		}
	}
	title := req.Title
	if title == "" {
		title = "fork of " + s.id
		if rec.Title != "" {
			title = "fork of " + rec.Title
		}
	}

	id := p.cfg.NewID()
	wt, err := p.cfg.Worktrees.Create(ctx, id, rec.Repo, base)
	if err != nil {
		return Session{}, fmt.Errorf("fork session %q: create worktree: %w", s.id, err)
	}
	// Whatever fails from here takes the worktree, its branch and the
	// rows back: no half-made fork stays.
	stored := false
	undo := func(err error) (Session, error) {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if stored {
			if uerr := p.forgetFork(bg, id); uerr != nil {
				p.logger.Warn("remove the rows of a failed fork", "session", id, "err", uerr)
			}
		}
		if _, rerr := p.cfg.Worktrees.Remove(bg, wt, true); rerr != nil {
			p.logger.Warn("remove the worktree of a failed fork", "session", id, "err", rerr)
		}
		return Session{}, err
	}
	if err := p.cfg.Worktrees.Restore(ctx, wt, tree); err != nil {
		return undo(fmt.Errorf("fork session %q: put its files in the fork: %w", s.id, err))
	}
	// The fork's diffs start where the session's do.
	wt.BaseCommit = src.BaseCommit
	now := p.cfg.Now()
	frec := SessionRecord{ID: id, Repo: rec.Repo, BaseRef: rec.BaseRef, Title: title, ActiveAgent: agent, Status: StatusOpen,
		CreatedAt: now, UpdatedAt: now, MCPServers: rec.MCPServers.Clone()}
	if err := p.cfg.Store.CreateSession(ctx, frec, wt); err != nil {
		return undo(fmt.Errorf("fork session %q: store the fork: %w", s.id, err))
	}
	stored = true
	// The session's events still queued are written first: the copy reads
	// the store.
	if err := p.cfg.Store.Flush(ctx); err != nil {
		return undo(fmt.Errorf("fork session %q: write its events: %w", s.id, err))
	}
	events, nturns, err := copier.CopyHistory(ctx, s.id, id, through, req.Turn > 0)
	if err != nil {
		return undo(fmt.Errorf("fork session %q: copy its history: %w", s.id, err))
	}
	fs, err := p.loadSession(ctx, id)
	if err != nil {
		return undo(err)
	}
	created := map[string]any{"repo": wt.Repo, "worktree": wt.Path, "branch": wt.Branch, "base_commit": wt.BaseCommit, "agent": agent,
		"warm": true, "forked_from": s.id}
	if req.Turn > 0 {
		created["forked_at_turn"] = req.Turn
	}
	p.emit(fs, backends.EventSessionCreated, agent, created)
	p.emit(fs, EventSessionForked, agent, map[string]any{"from": s.id, "turn": req.Turn, "through_turn": through,
		"commit": base, "tree": tree, "events": events, "turns": nturns})
	p.logger.Info("session forked", "session", id, "from", s.id, "turn", req.Turn, "events", events, "turns", nturns)
	p.startSetup(fs)
	p.startWarmUp(fs, agent)
	return p.get(ctx, id, true)
}

// forgetFork deletes the rows of a fork that failed before anyone saw it.
func (p *Pool) forgetFork(ctx context.Context, id string) error {
	p.mu.Lock()
	if s := p.sessions[id]; s != nil {
		delete(p.sessions, id)
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
	}
	p.mu.Unlock()
	err := p.cfg.Store.UpdateSessionStatus(ctx, id, StatusClosed)
	if err == nil {
		err = p.cfg.Store.DeleteClosedSession(ctx, id)
	}
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// countTurns says how many turns a session has, for an error.
func countTurns(n int) string {
	switch n {
	case 0:
		return "no turn"
	case 1:
		return "1 turn"
	}
	return fmt.Sprintf("%d turns (1 to %d)", n, n)
}

// fieldError is an error about one field of a request, which it names
// (FieldName) for the API's answer.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// FieldName is the request field the error is about.
func (e *fieldError) FieldName() string { return e.field }
