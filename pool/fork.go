package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// EventSessionForked is the event that says a session was forked from
// another: the fork's stream has it right after the history it copied
// and its own session.created. Data: from (the session forked), turn (the
// turn it was forked at; 0 for the session's state when forked), commit
// and tree (where its worktree started), events and turns (how many were
// copied), files_ms and history_ms (how long copying the files and the
// history took).
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
	// StartAt points a worktree nobody works in yet (a spare's) at
	// commit: its branch and index, not its files.
	StartAt(ctx context.Context, wt Worktree, commit string) error
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
	var through, lastEnded int64
	var at *Turn
	for i := range turns {
		t := &turns[i]
		if t.EndedAt != nil && t.ID != running && t.ID > lastEnded {
			lastEnded = t.ID
		}
		switch {
		case req.Turn > 0 && t.ID == req.Turn:
			at = t
		case req.Turn == 0 && t.EndedAt != nil && t.ID != running && t.ID > through:
			through = t.ID
		}
	}
	var base, tree string
	var snapTook time.Duration // reading the session's files
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
		t0 := time.Now()
		snap, err := forker.Snap(ctx, src)
		snapTook = time.Since(t0)
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

	created := map[string]any{"forked_from": s.id}
	if req.Turn > 0 {
		created["forked_at_turn"] = req.Turn
	}
	forked := map[string]any{"from": s.id, "turn": req.Turn, "through_turn": through, "commit": base, "tree": tree}

	// The fork's agent continues the session's conversation through ACP
	// session/fork when it can: the agent worked in the session, offers
	// session/fork, and the fork is of the session's state now while no
	// turn runs (its conversation then holds no more than the history
	// copied). Its agent then starts in a process of its own, in the
	// fork's worktree and confinement, and forks its session there.
	// Otherwise the briefing tells it the story.
	seed := p.nativeFork(ctx, s.id, agent, req.Turn, lastEnded, running)

	// A spare of the repository and agent, when one is kept, becomes the
	// fork: its agent is running already, and its worktree is given the
	// session's state. A fork whose session has MCP servers of its own
	// starts its agent with them, as a create does.
	if len(rec.MCPServers) == 0 && seed == nil {
		if sp := p.takeSpare(ctx, CreateRequest{Repo: rec.Repo, Agent: agent}); sp != nil {
			fa := &forkAdoption{baseRef: rec.BaseRef, start: base, tree: tree, base: src.BaseCommit, created: created, forked: forked, snapTook: snapTook,
				copy: func(ctx context.Context, to string) (int64, int64, error) {
					t0 := time.Now()
					defer func() { forked["history_ms"] = millis(time.Since(t0)) }()
					return copier.CopyHistory(ctx, s.id, to, through, req.Turn > 0)
				}}
			out, err := p.adoptSpare(ctx, CreateRequest{Repo: rec.Repo, Agent: agent, Title: title}, sp, nil, fa)
			if err == nil {
				p.logger.Info("session forked", "session", out.ID, "from", s.id, "turn", req.Turn, "spare", true)
				return out, nil
			}
			// The spare is discarded; the fork is made as without one.
			p.logger.Warn("fork from a spare failed; forking without one", "from", s.id, "spare", sp.id, "err", err)
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
	t0 := time.Now()
	if err := p.cfg.Worktrees.Restore(ctx, wt, tree); err != nil {
		return undo(fmt.Errorf("fork session %q: put its files in the fork: %w", s.id, err))
	}
	forked["files_ms"] = millis(snapTook + time.Since(t0))
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
	t0 = time.Now()
	events, nturns, err := copier.CopyHistory(ctx, s.id, id, through, req.Turn > 0)
	forked["history_ms"] = millis(time.Since(t0))
	if err != nil {
		return undo(fmt.Errorf("fork session %q: copy its history: %w", s.id, err))
	}
	fs, err := p.loadSession(ctx, id)
	if err != nil {
		return undo(err)
	}
	maps.Copy(created, map[string]any{"repo": wt.Repo, "worktree": wt.Path, "branch": wt.Branch, "base_commit": wt.BaseCommit, "agent": agent, "warm": true})
	p.emit(fs, backends.EventSessionCreated, agent, created)
	forked["events"], forked["turns"] = events, nturns
	p.emit(fs, EventSessionForked, agent, forked)
	p.logger.Info("session forked", "session", id, "from", s.id, "turn", req.Turn, "events", events, "turns", nturns, "agent_fork", seed != nil)
	if seed != nil {
		p.mu.Lock()
		if p.forkSeeds == nil {
			p.forkSeeds = map[string]forkSeed{}
		}
		p.forkSeeds[id] = *seed
		p.mu.Unlock()
	}
	p.startSetup(fs)
	p.startWarmUp(fs, agent)
	return p.get(ctx, id, true)
}

// forkSeed is an agent session a fork's agent forks at its first start.
type forkSeed struct {
	agent string // the fork's agent
	from  string // its agent session in the session forked
}

// nativeFork returns the seed of a fork of session whose agent forks its
// conversation there (ACP session/fork), or nil when it cannot: the
// agent has no agent session in the session, no running agent of its
// provider offers session/fork, the fork is at a turn before the last
// ended one (the agent's conversation holds more than that), or a turn
// runs (it would hold part of it).
func (p *Pool) nativeFork(ctx context.Context, session, agent string, turn, lastEnded, running int64) *forkSeed {
	if running != 0 || (turn > 0 && turn != lastEnded) {
		return nil
	}
	offered := false
	p.mu.Lock()
	for k, e := range p.entries {
		if k.agent == agent && e.backend != nil && e.info.Sessions.Fork {
			offered = true
			break
		}
	}
	p.mu.Unlock()
	if !offered {
		return nil
	}
	rec, err := p.cfg.Store.GetAgent(ctx, session, agent)
	if err != nil || rec.AgentSessionID == "" {
		return nil
	}
	return &forkSeed{agent: agent, from: rec.AgentSessionID}
}

// takeForkSeed returns, once, the seed of session's agent.
func (p *Pool) takeForkSeed(session, agent string) (forkSeed, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seed, ok := p.forkSeeds[session]
	if !ok || seed.agent != agent {
		return forkSeed{}, false
	}
	delete(p.forkSeeds, session)
	return seed, true
}

// forkAdoption is what adoptSpare needs to make a spare a fork.
type forkAdoption struct {
	baseRef string // the forked session's
	start   string // the commit the fork's branch starts at
	tree    string // the fork's files
	base    string // where the fork's diffs start: the forked session's base
	// copy copies the forked session's history into the fork, to, whose
	// rows are stored; it returns how many events and turns it copied.
	copy func(ctx context.Context, to string) (events, turns int64, err error)
	// created is added to the fork's session.created; forked is its
	// session.forked, to which the counts of the copy are added.
	created, forked map[string]any
	// snapTook is how long reading the session's files took.
	snapTook time.Duration
}

// millis is d in milliseconds, to a tenth, for an event.
func millis(d time.Duration) float64 { return float64(d.Microseconds()/100) / 10 }

// forkSpareWorktree gives sp's worktree wt the forked session's state:
// its branch starts at fa.start and its files are fa.tree. It returns
// the worktree as the fork has it, stored in sp and its session.
func (p *Pool) forkSpareWorktree(ctx context.Context, sp *spare, wt Worktree, fa *forkAdoption) (Worktree, error) {
	forker, ok := p.cfg.Worktrees.(Forker)
	if !ok {
		return Worktree{}, fmt.Errorf("fork: %w: the worktree manager cannot read a worktree's state", ErrInvalid)
	}
	if fa.start != sp.base {
		if err := forker.StartAt(ctx, wt, fa.start); err != nil {
			return Worktree{}, fmt.Errorf("fork into spare %s: %w", sp.id, err)
		}
	}
	t0 := time.Now()
	if err := p.cfg.Worktrees.Restore(ctx, wt, fa.tree); err != nil {
		return Worktree{}, fmt.Errorf("fork into spare %s: put the session's files in it: %w", sp.id, err)
	}
	fa.forked["files_ms"] = millis(fa.snapTook + time.Since(t0))
	wt.BaseCommit = fa.base
	p.mu.Lock()
	sp.wt = wt
	p.mu.Unlock()
	sp.s.mu.Lock()
	sp.s.wt = wt
	sp.s.mu.Unlock()
	return wt, nil
}

// forgetFork deletes the rows of a fork that failed before anyone saw it.
func (p *Pool) forgetFork(ctx context.Context, id string) error {
	p.mu.Lock()
	delete(p.forkSeeds, id)
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
