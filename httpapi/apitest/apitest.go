// Package apitest holds test doubles for code that serves or calls the
// agentpool API: Pool, a fake of the pool made of func fields, and EventLog,
// an in-memory session log whose subscriptions are the pool's own (a
// pool.Feed over the log: stored events, then live ones).
package apitest

import (
	"context"
	"errors"
	"slices"
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
	CreatePromptFunc func(context.Context, pool.CreateRequest, string) (pool.Session, pool.Turn, error, error)
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

// CreatePrompt calls CreatePromptFunc when set, else CreateFunc and then
// StartPromptFunc on the session made, as the pool does without a spare.
func (f *Pool) CreatePrompt(ctx context.Context, r pool.CreateRequest, text string) (pool.Session, pool.Turn, error, error) {
	if f.CreatePromptFunc != nil {
		return f.CreatePromptFunc(ctx, r, text)
	}
	s, err := f.Create(ctx, r)
	if err != nil {
		return pool.Session{}, pool.Turn{}, nil, err
	}
	t, terr := f.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: text})
	if terr == nil {
		s.Busy, s.Turn = true, t.ID
	}
	return s, t, terr, nil
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

// Subscriptions is the source of EventLogs' feeds; EndAll ends them all,
// as the pool's Shutdown does. Its methods are safe for concurrent use.
type Subscriptions struct {
	mu    sync.Mutex
	feeds []*pool.Feed
	ended bool
}

// NewSubscriptions returns a source of subscriptions. It never fails; the
// error is there for callers written when it could.
func NewSubscriptions() (*Subscriptions, error) {
	return &Subscriptions{}, nil
}

// add registers f, closing it at once after EndAll.
func (s *Subscriptions) add(f *pool.Feed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		f.Close(pool.ErrClosed)
		return
	}
	s.feeds = append(s.feeds, f)
}

// EndAll makes every subscription of the logs made with s (including later
// ones) end with pool.ErrClosed once it has read the events published
// before, as the pool's do when it shuts down. It returns nil.
func (s *Subscriptions) EndAll(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	for _, f := range s.feeds {
		f.Close(pool.ErrClosed)
	}
	s.feeds = nil
	return nil
}

// EventLog is a session's events: a stored log plus a pool.Feed of its
// recent events, whose subscriptions read the log when they are behind, as
// the pool's read the store. Its methods are safe for concurrent use.
type EventLog struct {
	src  *Subscriptions
	ring int

	mu     sync.Mutex
	events []backends.Event // events[i].Seq == i+1
	feed   *pool.Feed
	subs   []*pool.Subscription // handed out on feed
}

// NewEventLog returns an empty log whose feed keeps the ring most recent
// events in memory; src (which may be nil) can end its subscriptions.
func NewEventLog(src *Subscriptions, ring int) *EventLog {
	l := &EventLog{src: src, ring: ring}
	l.feed = l.newFeedLocked()
	return l
}

// newFeedLocked returns a feed over the log, holding its newest events.
func (l *EventLog) newFeedLocked() *pool.Feed {
	f := pool.NewFeed(l.ring, l.read)
	for _, ev := range l.events[max(0, len(l.events)-l.ring):] {
		f.Publish(ev)
	}
	if l.src != nil {
		l.src.add(f)
	}
	return f
}

// read is the feed's backing source: the stored events after `after`.
func (l *EventLog) read(_ context.Context, after int64, limit int) ([]backends.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rest := l.events[min(max(after, 0), int64(len(l.events))):]
	return slices.Clone(rest[:min(len(rest), limit)]), nil
}

// Subscribe is the pool's Subscribe: the events after `after`, stored then
// live.
func (l *EventLog) Subscribe(after int64) *pool.Subscription {
	l.mu.Lock()
	defer l.mu.Unlock()
	sub := l.feed.Subscribe(max(after, 0))
	l.subs = append(l.subs, sub)
	return sub
}

// Publish appends an event of agent "demo", stamped now; see Append.
func (l *EventLog) Publish(session string, typ backends.EventType, turn int64, data any) backends.Event {
	return l.Append(backends.Event{Session: session, Agent: "demo", Turn: turn, Type: typ, Data: backends.MustJSON(data)})
}

// Append gives ev the next seq (and the time now, if it has none), stores
// it and publishes it to the subscriptions.
func (l *EventLog) Append(ev backends.Event) backends.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev.Seq = int64(len(l.events)) + 1
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	l.events = append(l.events, ev)
	l.feed.Publish(ev)
	return ev
}

// DropAll ends every subscription made so far with pool.ErrSlowSubscriber
// once it has read the events published before, as the pool ends a
// daemon-wide subscriber that fell behind; later subscriptions work.
func (l *EventLog) DropAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.feed.Close(pool.ErrSlowSubscriber)
	l.feed = l.newFeedLocked()
	l.subs = nil
}

// Len counts the events of the log.
func (l *EventLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// Subscribers counts the subscriptions that have not ended (see
// pool.Subscription.Err) since the last DropAll.
func (l *EventLog) Subscribers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.subs = slices.DeleteFunc(l.subs, func(s *pool.Subscription) bool { return s.Err() != nil })
	return len(l.subs)
}
