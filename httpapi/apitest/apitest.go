// Package apitest holds test doubles for code that serves or calls the
// agentpool API: Pool, a fake of the pool made of func fields, and EventLog,
// an in-memory session log whose subscriptions behave as the pool's (a
// backlog, then live events; a full subscriber is dropped).
package apitest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
)

// Pool fakes the pool with func fields; a method whose func is nil fails
// with ErrUnset (Pending, Backends and Stats return zero values).
type Pool struct {
	CreateFunc       func(context.Context, pool.CreateRequest) (pool.Session, error)
	GetFunc          func(context.Context, string) (pool.Session, error)
	ListFunc         func(context.Context) ([]pool.Session, error)
	CloseFunc        func(context.Context, string, bool) (pool.CloseResult, error)
	StartPromptFunc  func(context.Context, pool.PromptRequest) (pool.Turn, error)
	WaitTurnFunc     func(context.Context, string, int64) (pool.Turn, error)
	CancelFunc       func(context.Context, string) error
	RetryFunc        func(context.Context, string) (pool.Turn, error)
	TurnsFunc        func(context.Context, string) ([]pool.Turn, error)
	SubscribeFunc    func(context.Context, string, int64) (*pool.Subscription, error)
	SubscribeAllFunc func() *pool.Subscription
	AnswerFunc       func(string, string, string) error
	PendingFunc      func(string) []permission.Pending
	DiffFunc         func(context.Context, string, int64) (pool.Diff, error)
	RestoreFunc      func(context.Context, string, int64, bool) error
	BackendsFunc     func() []pool.AgentStatus
	BackendFunc      func(context.Context, string, string) (backends.Backend, error)
	StatsFunc        func() pool.Stats
}

// ErrUnset is returned by a method whose func is not set.
var ErrUnset = errors.New("apitest: method not set")

// Create calls CreateFunc.
func (f *Pool) Create(ctx context.Context, r pool.CreateRequest) (pool.Session, error) {
	if f.CreateFunc == nil {
		return pool.Session{}, ErrUnset
	}
	return f.CreateFunc(ctx, r)
}

// Get calls GetFunc.
func (f *Pool) Get(ctx context.Context, id string) (pool.Session, error) {
	if f.GetFunc == nil {
		return pool.Session{}, ErrUnset
	}
	return f.GetFunc(ctx, id)
}

// List calls ListFunc.
func (f *Pool) List(ctx context.Context) ([]pool.Session, error) {
	if f.ListFunc == nil {
		return nil, ErrUnset
	}
	return f.ListFunc(ctx)
}

// Close calls CloseFunc.
func (f *Pool) Close(ctx context.Context, id string, discard bool) (pool.CloseResult, error) {
	if f.CloseFunc == nil {
		return pool.CloseResult{}, ErrUnset
	}
	return f.CloseFunc(ctx, id, discard)
}

// StartPrompt calls StartPromptFunc.
func (f *Pool) StartPrompt(ctx context.Context, r pool.PromptRequest) (pool.Turn, error) {
	if f.StartPromptFunc == nil {
		return pool.Turn{}, ErrUnset
	}
	return f.StartPromptFunc(ctx, r)
}

// WaitTurn calls WaitTurnFunc.
func (f *Pool) WaitTurn(ctx context.Context, id string, turn int64) (pool.Turn, error) {
	if f.WaitTurnFunc == nil {
		return pool.Turn{}, ErrUnset
	}
	return f.WaitTurnFunc(ctx, id, turn)
}

// Cancel calls CancelFunc.
func (f *Pool) Cancel(ctx context.Context, id string) error {
	if f.CancelFunc == nil {
		return ErrUnset
	}
	return f.CancelFunc(ctx, id)
}

// Retry calls RetryFunc.
func (f *Pool) Retry(ctx context.Context, id string) (pool.Turn, error) {
	if f.RetryFunc == nil {
		return pool.Turn{}, ErrUnset
	}
	return f.RetryFunc(ctx, id)
}

// Turns calls TurnsFunc.
func (f *Pool) Turns(ctx context.Context, id string) ([]pool.Turn, error) {
	if f.TurnsFunc == nil {
		return nil, ErrUnset
	}
	return f.TurnsFunc(ctx, id)
}

// Subscribe calls SubscribeFunc.
func (f *Pool) Subscribe(ctx context.Context, id string, after int64) (*pool.Subscription, error) {
	if f.SubscribeFunc == nil {
		return nil, ErrUnset
	}
	return f.SubscribeFunc(ctx, id, after)
}

// SubscribeAll calls SubscribeAllFunc.
func (f *Pool) SubscribeAll() *pool.Subscription {
	if f.SubscribeAllFunc == nil {
		panic("apitest: SubscribeAllFunc not set")
	}
	return f.SubscribeAllFunc()
}

// Answer calls AnswerFunc.
func (f *Pool) Answer(session, request, choice string) error {
	if f.AnswerFunc == nil {
		return ErrUnset
	}
	return f.AnswerFunc(session, request, choice)
}

// Pending calls PendingFunc.
func (f *Pool) Pending(session string) []permission.Pending {
	if f.PendingFunc == nil {
		return nil
	}
	return f.PendingFunc(session)
}

// Diff calls DiffFunc.
func (f *Pool) Diff(ctx context.Context, id string, turn int64) (pool.Diff, error) {
	if f.DiffFunc == nil {
		return pool.Diff{}, ErrUnset
	}
	return f.DiffFunc(ctx, id, turn)
}

// Restore calls RestoreFunc.
func (f *Pool) Restore(ctx context.Context, id string, turn int64, after bool) error {
	if f.RestoreFunc == nil {
		return ErrUnset
	}
	return f.RestoreFunc(ctx, id, turn, after)
}

// Backends calls BackendsFunc.
func (f *Pool) Backends() []pool.AgentStatus {
	if f.BackendsFunc == nil {
		return nil
	}
	return f.BackendsFunc()
}

// Backend calls BackendFunc.
func (f *Pool) Backend(ctx context.Context, session, agent string) (backends.Backend, error) {
	if f.BackendFunc == nil {
		return nil, ErrUnset
	}
	return f.BackendFunc(ctx, session, agent)
}

// Stats calls StatsFunc.
func (f *Pool) Stats() pool.Stats {
	if f.StatsFunc == nil {
		return pool.Stats{}
	}
	return f.StatsFunc()
}

// Subscriptions makes working *pool.Subscription values for fakes. The
// pool package has no exported constructor, so it borrows the
// subscriptions of a real, otherwise unused Pool's daemon-wide stream and
// points their C at the fake's own channel: Close and Err then behave as
// the real ones do.
type Subscriptions struct{ p *pool.Pool }

type nopStore struct{ pool.Store }

func (nopStore) Flush(context.Context) error { return nil }

type nopWorktrees struct{ pool.Worktrees }
type nopResolver struct{ pool.Resolver }
type nopLauncher struct{ pool.Launcher }

// NewSubscriptions returns a source of subscriptions.
func NewSubscriptions() (*Subscriptions, error) {
	p, err := pool.New(pool.Config{Store: nopStore{}, Worktrees: nopWorktrees{}, Resolver: nopResolver{}, Launcher: nopLauncher{},
		MemoryBudget: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, fmt.Errorf("apitest: %w", err)
	}
	return &Subscriptions{p: p}, nil
}

// New returns a subscription with the given backlog reading c.
func (s *Subscriptions) New(backlog []backends.Event, c <-chan backends.Event) *pool.Subscription {
	sub := s.p.SubscribeAll()
	sub.Backlog = backlog
	sub.C = c
	return sub
}

// EndAll makes every subscription made so far report pool.ErrClosed from
// Err, as the pool's do when the session or the pool closes. Their
// channels are the caller's to close.
func (s *Subscriptions) EndAll(ctx context.Context) error {
	return s.p.Shutdown(ctx)
}

// EventLog is a session's events: a stored log plus live subscribers,
// handed out under one lock as the pool does, so Subscribe has no gap. Its
// methods are safe for concurrent use.
type EventLog struct {
	src *Subscriptions
	buf int

	mu     sync.Mutex
	events []backends.Event
	subs   map[chan backends.Event]struct{}
}

// NewEventLog returns an empty log whose subscribers have buf slots.
func NewEventLog(src *Subscriptions, buf int) *EventLog {
	return &EventLog{src: src, buf: buf, subs: map[chan backends.Event]struct{}{}}
}

// Subscribe is the pool's Subscribe: the stored events after `after`, then
// the live ones.
func (l *EventLog) Subscribe(after int64) *pool.Subscription {
	l.mu.Lock()
	defer l.mu.Unlock()
	var backlog []backends.Event
	for _, ev := range l.events {
		if ev.Seq > after {
			backlog = append(backlog, ev)
		}
	}
	c := make(chan backends.Event, l.buf)
	l.subs[c] = struct{}{}
	return l.src.New(backlog, c)
}

// Publish appends an event of agent "demo", stamped now, and offers it to
// every subscriber; see Append.
func (l *EventLog) Publish(session string, typ backends.EventType, turn int64, data any) backends.Event {
	return l.Append(backends.Event{Session: session, Agent: "demo", Turn: turn, Type: typ, Data: backends.MustJSON(data)})
}

// Append gives ev the next seq (and the time now, if it has none), stores
// it and offers it to every subscriber; a full subscriber is dropped (its
// channel closed), as the pool does.
func (l *EventLog) Append(ev backends.Event) backends.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev.Seq = int64(len(l.events)) + 1
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	l.events = append(l.events, ev)
	for c := range l.subs {
		select {
		case c <- ev:
		default:
			delete(l.subs, c)
			close(c)
		}
	}
	return ev
}

// DropAll closes every live subscription, as the pool does to slow ones.
func (l *EventLog) DropAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.subs {
		delete(l.subs, c)
		close(c)
	}
}

// Len counts the events of the log.
func (l *EventLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// Subscribers counts the live subscriptions.
func (l *EventLog) Subscribers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.subs)
}
