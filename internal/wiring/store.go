package wiring

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/store"
)

// Store adapts *store.Store to pool.Store.
type Store struct{ S *store.Store }

var _ pool.Store = Store{}

func notFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %w", pool.ErrNotFound, err)
	}
	return err
}

// CreateSession stores a new session with its worktree, in one
// transaction.
func (a Store) CreateSession(ctx context.Context, s pool.SessionRecord, wt pool.Worktree) error {
	sess, err := toSession(s)
	if err != nil {
		return err
	}
	_, err = a.S.CreateSessionWorktree(ctx, sess, worktreeRow(wt))
	return err
}

// toSession is s as the store keeps it, its MCP servers as JSON.
func toSession(s pool.SessionRecord) (store.Session, error) {
	mcp := ""
	if len(s.MCPServers) > 0 {
		raw, err := json.Marshal(s.MCPServers)
		if err != nil {
			return store.Session{}, fmt.Errorf("create session %q: encode its MCP servers: %w", s.ID, err)
		}
		mcp = string(raw)
	}
	return store.Session{ID: s.ID, Repo: s.Repo, BaseRef: s.BaseRef, Title: s.Title, ActiveAgent: s.ActiveAgent, Status: s.Status, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, MCPServers: mcp}, nil
}

func fromSession(s store.Session) pool.SessionRecord {
	r := pool.SessionRecord{ID: s.ID, Repo: s.Repo, BaseRef: s.BaseRef, Title: s.Title, ActiveAgent: s.ActiveAgent, Status: s.Status, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, Host: s.Host}
	if s.MCPServers != "" {
		// Written by CreateSession: a row that does not decode leaves the
		// session without servers rather than unreadable.
		_ = json.Unmarshal([]byte(s.MCPServers), &r.MCPServers)
	}
	return r
}

// GetSession reads one session.
func (a Store) GetSession(ctx context.Context, id string) (pool.SessionRecord, error) {
	s, err := a.S.GetSession(ctx, id)
	return fromSession(s), notFound(err)
}

// ListSessions reads every session.
func (a Store) ListSessions(ctx context.Context) ([]pool.SessionRecord, error) {
	l, err := a.S.ListSessions(ctx)
	out := make([]pool.SessionRecord, 0, len(l))
	for _, s := range l {
		out = append(out, fromSession(s))
	}
	return out, err
}

// UpdateSessionStatus sets a session's status.
func (a Store) UpdateSessionStatus(ctx context.Context, id, status string) error {
	return notFound(a.S.UpdateSessionStatus(ctx, id, status))
}

// SetActiveAgent records the session's active agent.
func (a Store) SetActiveAgent(ctx context.Context, id, agent string) error {
	return notFound(a.S.SetActiveAgent(ctx, id, agent))
}

// worktreeRow is wt as the store keeps it.
func worktreeRow(wt pool.Worktree) store.WorktreeRow {
	return store.WorktreeRow{SessionID: wt.Session, Path: wt.Path, Branch: wt.Branch, BaseCommit: wt.BaseCommit, CreatedAt: wt.CreatedAt}
}

// PutWorktree records a session's worktree.
func (a Store) PutWorktree(ctx context.Context, wt pool.Worktree) error {
	return notFound(a.S.PutWorktree(ctx, worktreeRow(wt)))
}

// GetWorktree reads a session's worktree; Repo comes from the session.
func (a Store) GetWorktree(ctx context.Context, session string) (pool.Worktree, error) {
	w, err := a.S.GetWorktree(ctx, session)
	if err != nil {
		return pool.Worktree{}, notFound(err)
	}
	s, err := a.S.GetSession(ctx, session)
	if err != nil {
		return pool.Worktree{}, notFound(err)
	}
	return pool.Worktree{Session: w.SessionID, Repo: s.Repo, Path: w.Path, Branch: w.Branch, BaseCommit: w.BaseCommit, CreatedAt: w.CreatedAt, Host: w.Host}, nil
}

// MarkWorktreeRemoved records that the worktree is gone.
func (a Store) MarkWorktreeRemoved(ctx context.Context, session string) error {
	return notFound(a.S.MarkWorktreeRemoved(ctx, session))
}

func toAgent(r pool.AgentRecord) (store.AgentSession, error) {
	var opts json.RawMessage
	if len(r.ConfigOptions) > 0 {
		b, err := json.Marshal(r.ConfigOptions)
		if err != nil {
			return store.AgentSession{}, err
		}
		opts = b
	}
	return store.AgentSession{SessionID: r.Session, Agent: r.Agent, Kind: string(r.Kind), AgentSessionID: r.AgentSessionID, PID: r.PID, PGID: r.PGID,
		StartTicks: r.StartTicks, Status: r.Status, Restarts: r.Restarts, ResumeSupported: r.ResumeSupported, Mode: r.Mode,
		ConfigOptions: opts, SpecHash: r.SpecHash, LastActiveAt: r.LastActiveAt, CreatedAt: r.CreatedAt}, nil
}

func fromAgent(s store.AgentSession) pool.AgentRecord {
	r := pool.AgentRecord{Session: s.SessionID, Agent: s.Agent, Kind: backends.Kind(s.Kind), AgentSessionID: s.AgentSessionID, PID: s.PID, PGID: s.PGID,
		StartTicks: s.StartTicks, Status: s.Status, Restarts: s.Restarts, ResumeSupported: s.ResumeSupported, Mode: s.Mode,
		SpecHash: s.SpecHash, LastActiveAt: s.LastActiveAt, CreatedAt: s.CreatedAt}
	if len(s.ConfigOptions) > 0 {
		_ = json.Unmarshal(s.ConfigOptions, &r.ConfigOptions)
	}
	return r
}

// UpsertAgent stores an agent row.
func (a Store) UpsertAgent(ctx context.Context, r pool.AgentRecord) error {
	s, err := toAgent(r)
	if err != nil {
		return err
	}
	return notFound(a.S.UpsertAgentSession(ctx, s))
}

// AdoptSession queues a session made from a spare, its first event and
// its first turn, to be stored in one transaction (see
// store.Store.QueueAdoption); wait reports the outcome.
func (a Store) AdoptSession(ctx context.Context, s pool.SessionRecord, wt pool.Worktree, r pool.AgentRecord, adv *backends.Advertised, first backends.Event, committed func(backends.Event), turn *pool.Turn) (wait func(context.Context) error, err error) {
	sess, err := toSession(s)
	if err != nil {
		return nil, err
	}
	agent, err := toAgent(r)
	if err != nil {
		return nil, err
	}
	var raw []byte
	if adv != nil {
		if raw, err = json.Marshal(adv); err != nil {
			return nil, fmt.Errorf("adopt session %q: advertised: %w", s.ID, err)
		}
	}
	var st *store.Turn
	if turn != nil {
		t := storeTurn(*turn)
		st = &t
	}
	ad, err := a.S.QueueAdoption(ctx, sess, store.WorktreeRow{SessionID: wt.Session, Path: wt.Path, Branch: wt.Branch, BaseCommit: wt.BaseCommit, CreatedAt: wt.CreatedAt}, agent, raw, first, committed, st)
	if err != nil {
		return nil, err
	}
	return ad.Wait, nil
}

// GetAgent reads an agent row.
func (a Store) GetAgent(ctx context.Context, session, agent string) (pool.AgentRecord, error) {
	s, err := a.S.GetAgentSession(ctx, session, agent)
	return fromAgent(s), notFound(err)
}

// ListAgents reads a session's agent rows.
func (a Store) ListAgents(ctx context.Context, session string) ([]pool.AgentRecord, error) {
	l, err := a.S.ListAgentSessions(ctx, session)
	out := make([]pool.AgentRecord, 0, len(l))
	for _, s := range l {
		out = append(out, fromAgent(s))
	}
	return out, err
}

// MarkStaleAgents ends the rows a previous daemon left live.
func (a Store) MarkStaleAgents(ctx context.Context) ([]pool.AgentRecord, error) {
	l, err := a.S.MarkStaleAgentSessions(ctx)
	out := make([]pool.AgentRecord, 0, len(l))
	for _, s := range l {
		out = append(out, fromAgent(s))
	}
	return out, err
}

func fromTurn(t store.Turn) pool.Turn {
	return pool.Turn{ID: t.Number, Session: t.SessionID, Agent: t.Agent, Prompt: t.Prompt, StopReason: t.StopReason, Error: t.Error,
		CheckpointBefore: t.CheckpointBefore, CheckpointAfter: t.CheckpointAfter, StartedAt: t.StartedAt, EndedAt: t.EndedAt}
}

// StartTurn stores a new turn's row and returns its number in the session
// once it is durable.
func (a Store) StartTurn(ctx context.Context, t pool.Turn) (int64, error) {
	return a.S.StartTurn(ctx, storeTurn(t))
}

// storeTurn is the store's row of a turn being started.
func storeTurn(t pool.Turn) store.Turn {
	return store.Turn{SessionID: t.Session, Agent: t.Agent, Prompt: t.Prompt, CheckpointBefore: t.CheckpointBefore,
		StartedAt: t.StartedAt, RequestKey: t.RequestKey}
}

// TurnByKey reads the turn a prompt carrying key started.
func (a Store) TurnByKey(ctx context.Context, session, key string) (pool.Turn, error) {
	t, err := a.S.TurnByKey(ctx, session, key)
	return fromTurn(t), notFound(err)
}

// EndTurnEvent queues how a turn ended with the event that reports it, in
// one transaction.
func (a Store) EndTurnEvent(ctx context.Context, t pool.Turn, ev backends.Event, committed func(backends.Event)) error {
	return notFound(a.S.EndTurnEvent(ctx, t.ID, turnEnd(t), ev, committed))
}

// UnreportedTurnEnds lists the ended turns without a turn.ended event.
func (a Store) UnreportedTurnEnds(ctx context.Context) ([]pool.Turn, error) {
	l, err := a.S.UnreportedTurnEnds(ctx)
	out := make([]pool.Turn, 0, len(l))
	for _, t := range l {
		out = append(out, fromTurn(t))
	}
	return out, err
}

// ReportTurnEnd queues the turn.ended of an ended turn that has none.
func (a Store) ReportTurnEnd(ctx context.Context, ev backends.Event, committed func(backends.Event)) error {
	return a.S.ReportTurnEnd(ctx, ev.Turn, ev, committed)
}

func turnEnd(t pool.Turn) store.TurnEnd {
	end := store.TurnEnd{StopReason: t.StopReason, Error: t.Error, CheckpointAfter: t.CheckpointAfter}
	if t.EndedAt != nil {
		end.EndedAt = *t.EndedAt
	}
	return end
}

// GetTurn reads turn number n of a session.
func (a Store) GetTurn(ctx context.Context, session string, n int64) (pool.Turn, error) {
	t, err := a.S.GetTurn(ctx, session, n)
	return fromTurn(t), notFound(err)
}

// TurnKeys reads the numbers of a session's turns started by keyed prompts.
func (a Store) TurnKeys(ctx context.Context, session string) (map[string]int64, error) {
	return a.S.TurnKeys(ctx, session)
}

// LastTurn reads a session's latest turn.
func (a Store) LastTurn(ctx context.Context, session string) (pool.Turn, error) {
	t, err := a.S.LastTurn(ctx, session)
	return fromTurn(t), notFound(err)
}

// ListTurns reads a session's turns.
func (a Store) ListTurns(ctx context.Context, session string) ([]pool.Turn, error) {
	l, err := a.S.ListTurns(ctx, session)
	out := make([]pool.Turn, 0, len(l))
	for _, t := range l {
		out = append(out, fromTurn(t))
	}
	return out, err
}

// OpenTurns lists the turns that have not ended.
func (a Store) OpenTurns(ctx context.Context) ([]pool.Turn, error) {
	l, err := a.S.OpenTurns(ctx)
	out := make([]pool.Turn, 0, len(l))
	for _, t := range l {
		out = append(out, fromTurn(t))
	}
	return out, err
}

// Append queues an event; committed is called once it is durable.
func (a Store) Append(ev backends.Event, committed func(backends.Event)) {
	a.S.AppendNotify(ev, committed)
}

// AppendPast queues an event of an ending turn past a full queue.
func (a Store) AppendPast(ev backends.Event, committed func(backends.Event)) {
	a.S.AppendPast(ev, committed)
}

// WaitRoom waits for room in the store's write queue.
func (a Store) WaitRoom(ctx context.Context, session string) error {
	return a.S.WaitRoom(ctx, session)
}

// WaitRoomFor waits for room in the store's write queue and says how
// long it waited.
func (a Store) WaitRoomFor(ctx context.Context, session string) (time.Duration, error) {
	return a.S.WaitRoomFor(ctx, session)
}

// WriteQueues is store.Store.SessionQueues.
func (a Store) WriteQueues() []pool.WriteQueue {
	qs := a.S.SessionQueues()
	out := make([]pool.WriteQueue, len(qs))
	for i, q := range qs {
		out[i] = pool.WriteQueue{Session: q.Session, Events: q.Events, Bytes: q.Bytes, Oldest: q.Oldest,
			Slowed: q.Waiting, Held: q.Held, Holds: q.Holds}
	}
	return out
}

// Flush waits for queued events to be written.
func (a Store) Flush(ctx context.Context) error { return a.S.Flush(ctx) }

// AwaitDelivery is store.Store.AwaitDelivery.
func (a Store) AwaitDelivery(ctx context.Context, delivered <-chan struct{}) error {
	return a.S.AwaitDelivery(ctx, delivered)
}

// NextSeq returns the next event seq of a session.
func (a Store) NextSeq(ctx context.Context, session string) (int64, error) {
	return a.S.NextSeq(ctx, session)
}

// EventsPage reads a session's events after a seq, bounded by count and bytes.
func (a Store) EventsPage(ctx context.Context, session string, after int64, limit int, maxBytes int64) ([]backends.Event, error) {
	return a.S.EventsPage(ctx, session, after, limit, maxBytes)
}

// EventsOfTypes reads a session's written events of the given types.
func (a Store) EventsOfTypes(ctx context.Context, session string, types []string) ([]backends.Event, error) {
	return a.S.EventsOfTypes(ctx, session, types)
}

// InsertPermission stores a permission decision.
func (a Store) InsertPermission(ctx context.Context, r permission.Record) error {
	req, _ := json.Marshal(r.Request)
	decided := r.DecidedAt
	return a.S.InsertPermission(ctx, store.PermissionRow{ID: r.ID, SessionID: r.Session, Turn: r.Turn, Agent: r.Agent, Action: string(r.Action),
		Risk: string(r.Risk), Request: req, Decision: string(r.Decision), DecidedBy: r.DecidedBy, OptionKind: r.OptionKind,
		RequestedAt: r.RequestedAt, DecidedAt: &decided})
}

// RememberPermission stores the answer that r makes its session remember.
func (a Store) RememberPermission(ctx context.Context, r permission.Record) error {
	rem, ok := r.Remembered()
	if !ok {
		return fmt.Errorf("remember permission %q: %s by %s is no answer to remember", r.ID, r.OptionKind, r.DecidedBy)
	}
	return notFound(a.S.RememberPermission(ctx, store.RememberedPermission{SessionID: r.Session, Agent: rem.Agent,
		Action: string(rem.Action), OptionKind: rem.Kind, RequestID: r.ID, DecidedAt: r.DecidedAt}))
}

// RememberedPermissions reads the answers a session remembers.
func (a Store) RememberedPermissions(ctx context.Context, session string) ([]permission.Remembered, error) {
	rows, err := a.S.RememberedPermissions(ctx, session)
	if err != nil {
		return nil, err
	}
	out := make([]permission.Remembered, len(rows))
	for i, r := range rows {
		out[i] = permission.Remembered{Agent: r.Agent, Action: permission.Action(r.Action), Kind: r.OptionKind}
	}
	return out, nil
}

// ForgetPermissions deletes the answers a session remembers.
func (a Store) ForgetPermissions(ctx context.Context, session string) error {
	return a.S.ForgetPermissions(ctx, session)
}

// DeleteClosedSession deletes a closed session and everything stored about it.
func (a Store) DeleteClosedSession(ctx context.Context, id string) error {
	return notFound(a.S.DeleteClosedSession(ctx, id))
}

// SetAgentAdvertised records what an agent last advertised.
func (a Store) SetAgentAdvertised(ctx context.Context, session, agent string, adv backends.Advertised) error {
	b, err := json.Marshal(adv)
	if err != nil {
		return fmt.Errorf("set advertised of agent %q of session %q: %w", agent, session, err)
	}
	return notFound(a.S.SetAgentAdvertised(ctx, session, agent, b))
}

// AgentAdvertised reads what an agent last advertised; ok is false when
// nothing was recorded.
func (a Store) AgentAdvertised(ctx context.Context, session, agent string) (adv backends.Advertised, ok bool, err error) {
	raw, err := a.S.AgentAdvertised(ctx, session, agent)
	if err != nil || raw == nil {
		return backends.Advertised{}, false, notFound(err)
	}
	if err := json.Unmarshal(raw, &adv); err != nil {
		return backends.Advertised{}, false, fmt.Errorf("advertised of agent %q of session %q: %w", agent, session, err)
	}
	return adv, true, nil
}

var _ pool.HistoryCopier = Store{}

// CopyHistory copies a session's history into a fork
// (store.Store.CopyHistory).
func (a Store) CopyHistory(ctx context.Context, from, to string, turn int64, atTurn bool) (events, turns int64, err error) {
	c, err := a.S.CopyHistory(ctx, store.HistoryCopy{From: from, To: to, Turn: turn, AtTurn: atTurn})
	return c.Events, c.Turns, notFound(err)
}
