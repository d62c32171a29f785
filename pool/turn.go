package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// turnRun is the running turn of a session.
type turnRun struct {
	id     int64
	agent  string
	prompt string
	key    string // the prompt's PromptRequest.Key
	// registered is closed once StartPrompt has stored the turn (id is
	// set) or given it up: a copy of the prompt sent again meanwhile
	// waits for it.
	registered chan struct{}
	done       chan struct{}

	// ctx is the turn's context: cancelling it cancels the turn the
	// protocol's way, even before the backend has registered it.
	ctx    context.Context
	cancel context.CancelFunc

	// deadline is the turn's timeout (the agent's Spec.TurnDeadline):
	// past it, the turn's events no longer wait for room in the store.
	deadline time.Duration
	// spec is the agent's spec as resolved when the turn was asked for;
	// its handoff settings decide the turn's briefing.
	spec backends.Spec

	mu      sync.Mutex
	backend backends.Backend
	result  Turn
	// budget is the budget that cancelled the turn (see usage_budget.go).
	budget *BudgetExceeded
}

// requestCancel asks the turn to end and waits until it has (or ctx ends).
func (tr *turnRun) requestCancel(ctx context.Context) {
	tr.sendCancel(ctx)
	tr.awaitEnd(ctx)
}

// sendCancel asks the turn to end: its agent gets session/cancel.
func (tr *turnRun) sendCancel(ctx context.Context) {
	tr.cancel()
	tr.mu.Lock()
	b := tr.backend
	tr.mu.Unlock()
	if b != nil {
		_ = b.Cancel(ctx)
	}
}

// awaitEnd waits until the turn has ended, or ctx ends.
func (tr *turnRun) awaitEnd(ctx context.Context) {
	select {
	case <-tr.done:
	case <-ctx.Done():
	}
}

// StartPrompt starts a turn and returns it at once; its events follow on
// the session's stream and WaitTurn waits for its end. A session runs one
// turn at a time: a second gets ErrBusy. Choosing another agent than the
// active one switches the session to it; the previous agent stays warm.
//
// The turn is stored and turn.started published before its backend is
// acquired, so the agent's agent.starting carries the turn and follows
// turn.started. When every backend slot is busy the turn waits in a FIFO
// queue: the returned Turn has its QueuePosition; turn.queued and then
// turn.dequeued say when it waits and when it got its slot. A full queue
// is ErrAtCapacity. Once turn.started is published, every way the turn can
// fail (the agent cannot start, a cancel while queued, shutdown) ends it
// with turn.ended.
func (p *Pool) StartPrompt(ctx context.Context, req PromptRequest) (Turn, error) {
	if req.Text == "" {
		return Turn{}, fmt.Errorf("%w: text is empty", ErrInvalid)
	}
	s, err := p.loadSession(ctx, req.Session)
	if err != nil {
		return Turn{}, err
	}
	if req.Key != "" {
		// Sent again: the turn this key started, running or ended (on
		// this host or, before a move, on another). One still being
		// started here is s.turn, below.
		found, err := p.keyStarted(ctx, s, req.Key)
		if err != nil {
			return Turn{}, fmt.Errorf("turn of prompt key %q: %w", req.Key, err)
		}
		if found {
			t, err := p.cfg.Store.TurnByKey(ctx, s.id, req.Key)
			if err != nil {
				return Turn{}, fmt.Errorf("turn of prompt key %q: %w", req.Key, err)
			}
			return keyedTurn(t, req)
		}
	}
	s.mu.Lock()
	if s.closed && s.moving {
		s.mu.Unlock()
		return Turn{}, &userError{msg: fmt.Sprintf("session %s is moving to another host: send the prompt again in a moment", s.id),
			err: fmt.Errorf("session %q: %w", s.id, ErrNotOwner)}
	}
	if s.closed {
		s.mu.Unlock()
		return Turn{}, fmt.Errorf("session %q: %w", s.id, ErrClosed)
	}
	if s.turn != nil {
		first := s.turn
		id, same := first.id, req.Key != "" && first.key == req.Key
		s.mu.Unlock()
		if same {
			// The same prompt, sent again while its first copy runs or
			// is being started: that copy's turn, once it is stored; if
			// the first copy gave up, this one starts the turn.
			select {
			case <-first.registered:
			case <-ctx.Done():
				return Turn{}, ctx.Err()
			}
			s.mu.Lock()
			id = first.id
			s.mu.Unlock()
			if id != 0 {
				t, err := p.cfg.Store.GetTurn(ctx, s.id, id)
				if err != nil {
					return Turn{}, err
				}
				return keyedTurn(t, req)
			}
			return p.StartPrompt(ctx, req)
		}
		return Turn{}, fmt.Errorf("session %q is running turn %d: %w", s.id, id, ErrBusy)
	}
	agent := req.Agent
	if agent == "" {
		agent = s.rec.ActiveAgent
	}
	tr := p.newTurnRun(agent, req)
	s.turn = tr
	switchAgent := agent != s.rec.ActiveAgent
	wt := s.wt
	s.mu.Unlock()
	t, err := p.prepareTurn(ctx, s, tr, req, switchAgent, wt)
	if err != nil {
		return p.failTurn(s, tr, err)
	}
	t.ID, err = p.cfg.Store.StartTurn(ctx, t)
	p.noteKeyedTurn(s, t.RequestKey, t.ID, err)
	if err != nil {
		return p.failTurn(s, tr, fmt.Errorf("store turn: %w", err))
	}
	return p.launchTurn(s, tr, t)
}

// keyStarted says whether a prompt carrying key started a turn of s that
// the store committed. The session's keys are read from the store once
// and then kept with it: only the host that holds a session starts its
// turns, and it notes each one (noteKeyedTurn), so a prompt costs no read.
func (p *Pool) keyStarted(ctx context.Context, s *session, key string) (bool, error) {
	keys, err := s.keys.get(&s.mu, func() (map[string]int64, error) { return p.cfg.Store.TurnKeys(ctx, s.id) })
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	_, ok := keys[key]
	s.mu.Unlock()
	return ok, nil
}

// noteKeyedTurn notes turn id of s, that a prompt carrying key started,
// once StartTurn returned err for it. When the store may hold a turn that
// was not noted (StartTurn failed: its answer may have been lost after
// the commit), or the keys are being read, they are read again at the
// next keyed prompt.
func (p *Pool) noteKeyedTurn(s *session, key string, id int64, err error) {
	if key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.keys.val != nil {
		(*s.keys.val)[key] = id
		return
	}
	s.keys.forget()
}

// newTurnRun is the run of a turn of agent that req asks for, not yet
// stored; the caller makes it its session's turn.
func (p *Pool) newTurnRun(agent string, req PromptRequest) *turnRun {
	tr := &turnRun{agent: agent, prompt: req.Text, key: req.Key, done: make(chan struct{}), registered: make(chan struct{})}
	tr.ctx, tr.cancel = context.WithCancel(p.ctx)
	return tr
}

// failTurn gives up tr, the turn of s not yet stored, and returns err.
func (p *Pool) failTurn(s *session, tr *turnRun, err error) (Turn, error) {
	s.mu.Lock()
	if s.turn == tr {
		s.turn = nil
	}
	s.mu.Unlock()
	tr.cancel()
	close(tr.done)
	close(tr.registered)
	return Turn{}, err
}

// prepareTurn refuses what can be refused before the turn tr of s exists
// (an unknown or disabled agent, a budget spent, a closing pool, a full
// queue), switches the session to the turn's agent when switchAgent, and
// takes the checkpoint before the turn: it returns the turn's row, to be
// stored.
func (p *Pool) prepareTurn(ctx context.Context, s *session, tr *turnRun, req PromptRequest, switchAgent bool, wt Worktree) (Turn, error) {
	agent := tr.agent
	spec, err := p.cfg.Resolver.Resolve(agent)
	if err != nil {
		return Turn{}, fmt.Errorf("agent %q: %w", agent, err)
	}
	tr.deadline = spec.TurnDeadline()
	tr.spec = spec
	if err := p.refuseOverBudget(ctx, s, agent, spec.Budget); err != nil {
		return Turn{}, err
	}
	p.mu.Lock()
	err = p.queueFullLocked()
	if p.closing {
		err = fmt.Errorf("pool: %w", ErrClosed)
	}
	p.mu.Unlock()
	if err != nil {
		return Turn{}, err
	}
	if switchAgent {
		if err := p.cfg.Store.SetActiveAgent(ctx, s.id, agent); err != nil {
			return Turn{}, fmt.Errorf("switch agent: %w", err)
		}
		s.mu.Lock()
		s.rec.ActiveAgent = agent
		s.mu.Unlock()
	}
	before, err := p.cfg.Worktrees.Checkpoint(ctx, wt)
	if err != nil {
		return Turn{}, fmt.Errorf("checkpoint before the turn: %w", err)
	}
	return Turn{Session: s.id, Agent: agent, Prompt: req.Text, CheckpointBefore: before, StartedAt: p.cfg.Now(), RequestKey: req.Key}, nil
}

// launchTurn starts tr, the turn of s whose row t is stored: it publishes
// turn.started and gives the turn its backend, or queues it for a slot.
func (p *Pool) launchTurn(s *session, tr *turnRun, t Turn) (Turn, error) {
	agent := t.Agent
	s.mu.Lock()
	tr.id = t.ID
	s.mu.Unlock()
	close(tr.registered)
	p.turns.Add(1)
	p.publish(s, backends.Event{Type: backends.EventTurnStarted, Agent: agent, Turn: t.ID,
		Data: backends.MustJSON(map[string]any{"turn": t.ID, "agent": agent, "prompt": t.Prompt, "checkpoint": t.CheckpointBefore})})

	p.mu.Lock()
	e, w, pos, err := p.acquireOrQueueLocked(s, agent, t.ID)
	var queuedAt time.Time
	if w != nil {
		queuedAt = w.queuedAt
	}
	p.mu.Unlock()
	if err != nil {
		// turn.started is out: end the turn, and refuse the prompt.
		p.abandonTurn(s, tr, t, backends.StopError, "no agent for the turn", err)
		return Turn{}, err
	}
	p.wg.Add(1)
	if w == nil {
		go p.runTurn(s, e, tr, t)
		return t, nil
	}
	t.QueuePosition = pos
	// The waiter may be served at once; its goroutine starts only now, so
	// turn.dequeued and the agent's events follow turn.queued.
	p.publish(s, backends.Event{Time: queuedAt, Type: EventTurnQueued, Agent: agent, Turn: t.ID,
		Data: backends.MustJSON(map[string]any{"turn": t.ID, "position": pos, "max_warm": p.cfg.MaxWarm})})
	go p.awaitSlot(s, w, tr, t)
	return t, nil
}

// keyedTurn answers a prompt whose key started turn t: t, if it is the
// same prompt (text, and agent when one is named); else the key was
// reused for another prompt, which is refused rather than dropped.
func keyedTurn(t Turn, req PromptRequest) (Turn, error) {
	if t.Prompt != req.Text || req.Agent != "" && req.Agent != t.Agent {
		return Turn{}, &userError{msg: fmt.Sprintf("the prompt key %q started turn %d with another prompt: a key names one prompt, send a new one with another key", req.Key, t.ID),
			err: fmt.Errorf("%w: prompt key %q reused", ErrInvalid, req.Key)}
	}
	return t, nil
}

// Prompt runs a turn and waits for its end. If ctx ends first the turn
// goes on; its end is on the session's stream.
func (p *Pool) Prompt(ctx context.Context, req PromptRequest) (Turn, error) {
	t, err := p.StartPrompt(ctx, req)
	if err != nil {
		return t, err
	}
	return p.WaitTurn(ctx, req.Session, t.ID)
}

// WaitTurn waits for a turn of the session to end and returns it.
func (p *Pool) WaitTurn(ctx context.Context, id string, turn int64) (Turn, error) {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return Turn{}, err
	}
	s.mu.Lock()
	tr := s.turn
	if tr == nil || tr.id != turn {
		tr = s.last
	}
	s.mu.Unlock()
	if tr != nil && tr.id == turn {
		select {
		case <-tr.done:
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return tr.result, nil
		case <-ctx.Done():
			return Turn{}, ctx.Err()
		}
	}
	// Ended before the session's last turn, or before a restart: the
	// stored turn, with its usage as the running turn's result has it.
	t, err := p.cfg.Store.GetTurn(ctx, id, turn)
	if err != nil {
		return Turn{}, fmt.Errorf("turn %d of session %q: %w", turn, id, ErrNoTurn)
	}
	one := []Turn{t}
	if err := p.turnUsage(ctx, id, one); err != nil {
		return Turn{}, err
	}
	return one[0], nil
}

func (p *Pool) runTurn(s *session, e *entry, tr *turnRun, t Turn) {
	defer p.wg.Done()
	b, err := p.waitStarted(p.ctx, e)
	var res backends.TurnResult
	var answer answerText
	if err == nil {
		tr.mu.Lock()
		tr.backend = b
		tr.mu.Unlock()
		ending, stop := turnEnding(tr)
		emit := func(ev backends.Event) {
			ev.Turn = t.ID
			ev, drops := boundUsage(ev)
			p.noteAdvertised(e, ev)
			answer.note(ev)
			p.publishTurn(s, ev, ending)
			p.noteUsage(e, ev, drops)
		}
		p.mu.Lock()
		start := e.starts
		p.mu.Unlock()
		brief := p.briefing(s, e, b, tr, t)
		res, err = b.Prompt(tr.ctx, backends.Prompt{Text: t.Prompt, Turn: t.ID, Briefing: brief}, emit)
		stop()
		p.mu.Lock()
		if e.starts == start {
			e.heard = t.ID // its conversation has this turn now
		}
		p.mu.Unlock()
	}
	if res.StopReason == "" {
		res.StopReason = backends.StopError
	}
	t.StopReason = string(res.StopReason)
	if err != nil {
		t.Error = err.Error()
		p.turnErrors.Add(1)
	}
	usage, drops := checkPromptUsage(res.Usage)
	p.publishDrops(s, t.Agent, t.ID, drops)
	res.Usage = usage
	overBudget := p.noteTurnUsage(s, tr, &t, res.Usage)
	s.mu.Lock()
	wt := s.wt
	s.mu.Unlock()
	ctx := context.WithoutCancel(p.ctx)
	var history HistoryImport
	if hi, ok := p.cfg.Worktrees.(HistoryImporter); ok {
		var herr error
		if history, herr = hi.ImportHistory(ctx, wt); herr != nil {
			p.logger.Warn("import the agent's commits", "session", s.id, "turn", t.ID, "err", herr)
		}
	}
	after, cerr := p.cfg.Worktrees.Checkpoint(ctx, wt)
	if cerr != nil {
		p.logger.Warn("checkpoint after the turn", "session", s.id, "turn", t.ID, "err", cerr)
	}
	t.CheckpointAfter = after
	end := p.cfg.Now()
	t.EndedAt = &end
	p.histMu.Lock()
	p.turnHist.observe(end.Sub(t.StartedAt).Seconds())
	p.histMu.Unlock()
	data := map[string]any{"turn": t.ID, "agent": t.Agent, "stop_reason": t.StopReason, "checkpoint": after,
		"duration_ms": end.Sub(t.StartedAt).Milliseconds()}
	if t.Error != "" {
		data["error"] = t.Error
	}
	if len(res.Usage) > 0 {
		data["usage"] = res.Usage
	}
	if overBudget != nil {
		data["budget_exceeded"] = overBudget
	}
	if history.Commits > 0 || history.Refused != "" {
		data["history"] = history
	}
	if a := answer.text(); a != "" {
		data["answer"] = a
	}
	if res.UserMessageID != "" {
		data["user_message_id"] = res.UserMessageID
	}
	if after != "" && after != t.CheckpointBefore {
		if d, err := p.cfg.Worktrees.Diff(ctx, wt, t.CheckpointBefore, after); err == nil {
			data["changes"] = d.Stat
			if len(d.Files) > 0 {
				data["files"] = fileList(d.Files)
			}
			if d.HiddenCount > 0 {
				// Files that ignore rules the session changed keep out of
				// the diff: say so at the turn's end, not only in the diff.
				data["hidden"] = map[string]any{"count": d.HiddenCount, "files": d.Hidden[:min(len(d.Hidden), 10)]}
			}
		}
	}
	tr.mu.Lock()
	tr.result = t
	tr.mu.Unlock()
	s.mu.Lock()
	s.last = tr // before endTurn frees the session: a waiter finds it
	s.mu.Unlock()
	p.release(e)
	// The turn's end row and its turn.ended are committed together, and
	// the session becomes free as turn.ended takes its seq (see endTurn).
	delivered := make(chan struct{})
	queued := p.endTurn(s, t, data, delivered)
	tr.cancel()
	// A client waiting for the turn (POST prompt with wait) gets its end
	// only once turn.ended, and so the turn's end row committed with it,
	// is durable: what it is told is what a restart will tell it.
	if queued && !p.awaitDelivered(delivered) {
		p.logger.Warn("turn end not yet written; answering its waiters anyway", "session", s.id, "turn", t.ID)
	}
	close(tr.done)
}

// Cancel ends the session's running turn the protocol's way and waits
// until it has ended. Pending permission requests are answered "cancelled".
func (p *Pool) Cancel(ctx context.Context, id string) error {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	tr := s.turn
	s.mu.Unlock()
	if tr == nil {
		return fmt.Errorf("session %q has no running turn: %w", id, ErrNoTurn)
	}
	// As ACP orders it: session/cancel first, then the pending permission
	// requests answered "cancelled". The other way round, an agent whose
	// request is answered before it reads the cancel may finish its turn
	// as if nothing had been asked of it (end_turn, not cancelled).
	tr.sendCancel(ctx)
	p.broker.CancelSession(id)
	tr.awaitEnd(ctx)
	if ctx.Err() != nil {
		return fmt.Errorf("cancel: %w", ctx.Err())
	}
	return nil
}

// Retry starts a new turn with the session's last prompt and agent.
func (p *Pool) Retry(ctx context.Context, id string) (Turn, error) {
	last, err := p.cfg.Store.LastTurn(ctx, id)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Turn{}, fmt.Errorf("session %q has no turn to retry: %w", id, ErrNoTurn)
		}
		return Turn{}, err
	}
	return p.StartPrompt(ctx, PromptRequest{Session: id, Agent: last.Agent, Text: last.Prompt})
}

// Turns lists the session's turns, oldest first.
func (p *Pool) Turns(ctx context.Context, id string) ([]Turn, error) {
	if _, err := p.loadSession(ctx, id); err != nil {
		return nil, err
	}
	turns, err := p.cfg.Store.ListTurns(ctx, id)
	if err != nil {
		return nil, err
	}
	return turns, p.turnUsage(ctx, id, turns)
}

func (p *Pool) turnOf(ctx context.Context, s *session, turn int64) (Turn, error) {
	t, err := p.cfg.Store.GetTurn(ctx, s.id, turn)
	if err != nil {
		return Turn{}, fmt.Errorf("turn %d of session %q: %w", turn, s.id, ErrNoTurn)
	}
	return t, nil
}

// Diff returns the changes of one turn (before → after; a running turn
// against the live state), or with turn 0 of the whole session against
// its base commit. A closed session's diffs stay readable from what git
// keeps: a turn's from its checkpoints, the whole session's from its
// branch as it is now (an empty diff once the branch is gone: the session
// left no work, or it was discarded).
func (p *Pool) Diff(ctx context.Context, id string, turn int64) (Diff, error) {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return Diff{}, err
	}
	s.mu.Lock()
	wt, closed := s.wt, s.closed
	s.mu.Unlock()
	if turn == 0 && closed {
		d, err := p.cfg.Worktrees.Diff(ctx, wt, "", "refs/heads/"+wt.Branch)
		if err != nil {
			// No branch: compare the base with itself. An error that is
			// not about the branch fails this again.
			return p.cfg.Worktrees.Diff(ctx, wt, "", wt.BaseCommit)
		}
		return d, nil
	}
	if turn == 0 {
		return p.cfg.Worktrees.Diff(ctx, wt, "", "")
	}
	t, err := p.turnOf(ctx, s, turn)
	if err != nil {
		return Diff{}, err
	}
	return p.cfg.Worktrees.Diff(ctx, wt, t.CheckpointBefore, t.CheckpointAfter)
}

// Restore puts the worktree back to a turn's checkpoint: the state before
// it (undoing it and everything after), or with after the state it left.
func (p *Pool) Restore(ctx context.Context, id string, turn int64, after bool) error {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return err
	}
	t, err := p.turnOf(ctx, s, turn)
	if err != nil {
		return err
	}
	cp := t.CheckpointBefore
	if after {
		cp = t.CheckpointAfter
	}
	if cp == "" {
		return fmt.Errorf("turn %d has no checkpoint %s it: %w", turn, map[bool]string{true: "after", false: "before"}[after], ErrNoTurn)
	}
	s.mu.Lock()
	if s.turn != nil {
		s.mu.Unlock()
		return fmt.Errorf("session %q: %w", id, ErrBusy)
	}
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("session %q: %w", id, ErrClosed)
	}
	wt := s.wt
	s.mu.Unlock()
	if err := p.cfg.Worktrees.Restore(ctx, wt, cp); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	p.emit(s, "worktree.restored", "", map[string]any{"turn": turn, "after": after, "checkpoint": cp})
	return nil
}

// SetMode switches an agent's session mode and remembers it, so a restart
// re-applies it; see SetAgentConfig.
func (p *Pool) SetMode(ctx context.Context, id, agent, mode string) error {
	_, err := p.SetAgentConfig(ctx, id, agent, ConfigChange{Mode: mode})
	return err
}
