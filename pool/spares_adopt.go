package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// RefillDelay is how long after an adoption its spare's replacement
// starts being made.
const RefillDelay = 250 * time.Millisecond

// spareFits says whether req may adopt a spare: it leaves the session's
// id, base, MCP servers and agent session to the pool (see spares.go).
func (r CreateRequest) spareFits() bool {
	return r.ID == "" && r.BaseRef == "" && len(r.MCPServers) == 0 && r.AgentSession == "" && r.warmOn()
}

// takeSpare returns a ready spare of req's repository and agent whose
// base is the repository's head now and whose setup state is current,
// taken out of the pool's spares; nil when there is none. Stale spares it
// meets are discarded.
func (p *Pool) takeSpare(ctx context.Context, req CreateRequest) *spare {
	if !p.sparesOn() || !req.spareFits() {
		return nil
	}
	repo := filepath.Clean(req.Repo)
	var head, setup string
	var headErr error
	read := false
	for {
		p.mu.Lock()
		var sp *spare
		for _, c := range p.spares {
			if c.ready && c.e.state == StateIdle && !c.e.inUse && c.agent == req.Agent && (c.repo == repo || c.wt.Repo == repo) && (sp == nil || c.created.Before(sp.created)) {
				sp = c
			}
		}
		if sp == nil || p.closing {
			p.mu.Unlock()
			return nil
		}
		delete(p.spares, sp.id)
		p.mu.Unlock()
		if !read {
			read = true
			head, setup, headErr = p.spareState(ctx, sp.wt.Repo)
		}
		reason := ""
		switch {
		case headErr != nil:
			reason = "repository unreadable: " + headErr.Error()
		case head != sp.base:
			reason = "base moved"
		case setup != sp.setup:
			reason = "setup or its trust changed"
		}
		if reason == "" {
			return sp
		}
		p.mu.Lock()
		p.dropSpareLocked(sp)
		p.mu.Unlock()
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.finishDrop(sp, reason) }()
		if headErr != nil {
			return nil
		}
	}
}

// spareState reads what makes a spare of repo stale, the head and the
// setup's state, both at once: a create waits for them.
func (p *Pool) spareState(ctx context.Context, repo string) (head, setup string, err error) {
	var setupErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		setup, setupErr = p.cfg.Spares.Git.SetupState(ctx, repo)
	}()
	head, err = p.cfg.Spares.Git.Head(ctx, repo)
	<-done
	return head, setup, errors.Join(err, setupErr)
}

// adoptSpare makes sp the session req asks for: its row and worktree are
// stored, the session joins the pool with its agent already running, and
// the setup's steps, run ahead, are published on it. A failure discards
// the spare. When first is not nil and req sets no budget (to be stored
// before the session's first event), the session's first turn starts
// too: its row is stored with the session's, in the same commit, its
// agent is prompted while that commit is made, and first says how it
// went.
//
// With fork, the spare becomes a fork instead (see forkAdoption): its
// worktree is given the forked session's state before its rows are
// stored, and its stream starts with that session's history, copied once
// its rows are, before its session.created.
func (p *Pool) adoptSpare(ctx context.Context, req CreateRequest, sp *spare, first *firstPrompt, fork *forkAdoption) (Session, error) {
	var tr *turnRun // the first turn, until it is launched
	fail := func(err error) (Session, error) {
		if tr != nil {
			_, _ = p.failTurn(sp.s, tr, err)
		}
		p.mu.Lock()
		p.dropSpareLocked(sp)
		p.mu.Unlock()
		p.finishDrop(sp, "adoption failed: "+err.Error())
		return Session{}, err
	}
	p.mu.Lock()
	wt, s, e, info := sp.wt, sp.s, sp.e, sp.e.info
	p.mu.Unlock()
	if fork != nil {
		var err error
		if wt, err = p.forkSpareWorktree(ctx, sp, wt, fork); err != nil {
			return fail(err)
		}
	}
	now := p.cfg.Now()
	rec := SessionRecord{ID: sp.id, Repo: wt.Repo, Title: req.Title, ActiveAgent: req.Agent, Status: StatusOpen, CreatedAt: now, UpdatedAt: now}
	if fork != nil {
		rec.BaseRef = fork.baseRef
	}
	// One transaction: the session, its worktree and its running agent
	// (with what it advertised) are stored together or not at all, and
	// session.created with them, so that the create waits for one
	// commit.
	var adv *backends.Advertised
	e.adv.mu.Lock()
	if e.adv.known {
		a := e.adv.adv
		adv = &a
	}
	e.adv.mu.Unlock()
	created := map[string]any{"repo": wt.Repo, "worktree": wt.Path, "branch": wt.Branch, "base_commit": wt.BaseCommit, "agent": req.Agent, "warm": true, "spare": true}
	if req.Budget != nil && !req.Budget.IsZero() {
		created["budget"] = req.Budget
	}
	budget := req.Budget != nil && !req.Budget.IsZero()
	if fork != nil {
		maps.Copy(created, fork.created)
		first = nil
	}
	var turn *Turn
	if first != nil && !budget {
		// The turn is the session's before the session is in the pool:
		// a prompt that finds the session finds it busy.
		first.tried = true
		preq := PromptRequest{Session: s.id, Text: first.text}
		tr = p.newTurnRun(req.Agent, preq)
		s.mu.Lock()
		s.turn = tr
		s.mu.Unlock()
		t, err := p.prepareTurn(ctx, s, tr, preq, false, wt)
		if err != nil {
			// The session is made all the same, without its first turn.
			_, first.err = p.failTurn(s, tr, err)
			tr = nil
		} else {
			turn = &t
		}
	}
	if err := p.cfg.Store.WaitRoom(ctx, s.id); err != nil {
		p.logger.Debug("adopt without waiting for room in the store's queue", "session", s.id, "err", err)
	}
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return fail(fmt.Errorf("pool: %w", ErrClosed))
	}
	s.mu.Lock()
	s.rec = rec
	s.spare = false
	s.mu.Unlock()
	p.sessions[s.id] = s
	p.mu.Unlock()
	// forget undoes the above when the adoption is not stored: nothing of
	// the session reached a stream (its first event is stored only with
	// it), and it is a spare again, to be discarded.
	forget := func(err error) (Session, error) {
		p.unadopt(s)
		return fail(err)
	}
	// session.created goes with the adoption, unless a budget is to be
	// stored in between (rare: a create that sets one).
	var created1 backends.Event
	var delivered chan struct{}
	s.mu.Lock()
	if !budget && fork == nil {
		delivered = make(chan struct{})
		s.seq++
		created1 = backends.Event{Seq: s.seq, Session: s.id, Time: p.cfg.Now(), Type: backends.EventSessionCreated, Agent: req.Agent, Data: backends.MustJSON(created)}
	}
	stored, err := p.cfg.Store.AdoptSession(ctx, rec, wt, p.agentRecordOf(e, info, AgentActive, AgentRecord{}), adv, created1, p.deliverTo(s, delivered), turn)
	s.mu.Unlock()
	if err != nil {
		return forget(fmt.Errorf("store session: %w", err))
	}
	// The session's next events, queued behind its rows: they are stored,
	// and delivered, only with them.
	announce := func() {
		for _, ev := range sp.setupEvents {
			p.emit(s, ev.Type, "", ev.Data)
		}
		p.emit(s, backends.EventAgentReady, req.Agent, map[string]any{
			"pid": info.PID, "agent_session_id": info.AgentSessionID, "agent_name": info.AgentName, "agent_version": info.AgentVersion,
			"modes": info.Modes, "current_mode": info.CurrentMode, "confinement": info.Confinement, "spare": true,
		})
		adopted := map[string]any{"spare": sp.id, "repo": sp.repo, "base_commit": sp.base, "age_ms": now.Sub(sp.created).Milliseconds()}
		p.emit(s, EventSpareAdopted, req.Agent, adopted)
	}
	if tr != nil {
		// The first turn starts now, while its row commits with the
		// session's: the agent works on the prompt during the commit
		// instead of after it. Nothing of the session reaches a reader or
		// the caller before the commit (its events are queued behind its
		// rows, and the create answers after them), so a turn that runs
		// is a stored turn, as for any prompt. Should the adoption be
		// refused, the turn is cancelled and the spare discarded with its
		// worktree: no one ever saw the session.
		announce()
		t := *turn
		t.ID = 1 // stored with the session: its first turn
		first.turn, first.err = p.launchTurn(s, tr, t)
		launched := tr
		tr = nil
		if err := stored(ctx); err != nil {
			return p.abandonAdoption(sp, s, launched, fmt.Errorf("store session: %w", err))
		}
		p.published.Add(1)
		if !p.awaitDelivered(delivered) {
			p.logger.Warn("event not yet written; going on without it", "session", s.id, "type", backends.EventSessionCreated)
		}
	} else {
		if err := stored(ctx); err != nil {
			return forget(fmt.Errorf("store session: %w", err))
		}
		if fork != nil {
			// The history goes first, then session.created: the fork's
			// own events follow the copied ones.
			events, turns, err := fork.copy(ctx, s.id)
			if err != nil {
				bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				if ferr := p.forgetFork(bg, s.id); ferr != nil {
					p.logger.Warn("remove the rows of a failed fork", "session", s.id, "err", ferr)
				}
				cancel()
				return fail(err)
			}
			s.mu.Lock()
			s.seq = events
			s.mu.Unlock()
			p.emit(s, backends.EventSessionCreated, req.Agent, created)
			forked := maps.Clone(fork.forked)
			forked["events"], forked["turns"] = events, turns
			p.emit(s, EventSessionForked, req.Agent, forked)
		} else if budget {
			if err := p.setSessionBudget(ctx, s, *req.Budget); err != nil {
				// The session's row stays, as a session without its worktree.
				return forget(fmt.Errorf("store the session's budget: %w", err))
			}
			p.emit(s, backends.EventSessionCreated, req.Agent, created) // waits for its delivery
		} else {
			p.published.Add(1)
			if !p.awaitDelivered(delivered) {
				p.logger.Warn("event not yet written; going on without it", "session", s.id, "type", backends.EventSessionCreated)
			}
		}
		announce()
	}
	p.logger.Info("spare adopted", "session", sp.id, "repo", sp.repo, "agent", sp.agent)
	// Its replacement is made a moment later, not now: making a worktree
	// and starting an agent would take the CPUs from the session's first
	// turn, which the create's caller is about to send or has sent.
	time.AfterFunc(RefillDelay, p.wakeSpares)
	if fork != nil {
		return p.get(ctx, s.id, true) // its copied turns and usage are in the store
	}
	return p.adopted(s, req.Budget), nil
}

// unadopt takes s, a spare whose adoption was not stored, out of the
// pool's sessions: it is a spare again, to be discarded.
func (p *Pool) unadopt(s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sessions[s.id] == s {
		delete(p.sessions, s.id)
	}
	s.mu.Lock()
	s.spare = true
	s.mu.Unlock()
}

// abandonWait is how long a refused adoption's first turn has to end
// before its spare is discarded all the same.
const abandonWait = 10 * time.Second

// abandonAdoption undoes an adoption the store refused after its first
// turn tr started: the session leaves the pool, the turn is cancelled
// (its events are refused with the session), and once it has ended the
// spare is discarded, its agent stopped and its worktree removed. It
// returns err.
func (p *Pool) abandonAdoption(sp *spare, s *session, tr *turnRun, err error) (Session, error) {
	p.broker.CancelSession(s.id) // as Cancel: pending permission requests are answered
	tr.cancel()
	p.unadopt(s)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(abandonWait)
		defer t.Stop()
		select {
		case <-tr.done:
		case <-t.C:
		}
		p.mu.Lock()
		p.dropSpareLocked(sp)
		p.mu.Unlock()
		p.finishDrop(sp, "adoption failed: "+err.Error())
	}()
	return Session{}, err
}

// adopted is what Get answers for a session just adopted, made from
// memory: its one agent running, no usage yet (the spare's agent has had
// no turn), the budget the request set. A create waits for no store read.
func (p *Pool) adopted(s *session, budget *backends.Budget) Session {
	running := p.backendsOf(s.id)
	s.mu.Lock()
	out := Session{
		ID: s.id, Repo: s.rec.Repo, BaseRef: s.rec.BaseRef, Title: s.rec.Title, ActiveAgent: s.rec.ActiveAgent,
		Status: s.rec.Status, Worktree: s.wt, CreatedAt: s.rec.CreatedAt, UpdatedAt: s.rec.UpdatedAt, LastSeq: s.seq,
		MCPServers: s.rec.MCPServers.Redact(), Agents: running,
	}
	if s.turn != nil {
		out.Busy, out.Turn = true, s.turn.id
	}
	s.mu.Unlock()
	if p.cfg.Usage != nil {
		u := SessionUsage{Session: s.id, Cost: []Money{}, Agents: []AgentSummary{}}
		if budget != nil && !budget.IsZero() {
			b := *budget
			u.Budget = &b
		}
		out.Usage = &u
	}
	return out
}
