package permission

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// DefaultTimeout is how long a request waits for a person before it is
// rejected.
const DefaultTimeout = 5 * time.Minute

// Log attribute keys.
const (
	logKeyRequest   = "request"
	logKeySession   = "session"
	logKeyAgent     = "agent"
	logKeyAction    = "action"
	logKeyRisk      = "risk"
	logKeyDecision  = "decision"
	logKeyDecidedBy = "decided_by"
	logKeyOption    = "option_kind"
	logKeyNote      = "note"
)

// Notes recorded with cancelled outcomes.
const (
	noteNoOptions        = "the agent offered no options: answered cancelled"
	noteSessionCancelled = "session cancelled"
	noteClosed           = "permission broker closed"
)

// Errors returned by Broker methods.
var (
	// ErrUnknownRequest is returned by Answer for a request that is not
	// pending in the given session: unknown, of another session, or already
	// resolved.
	ErrUnknownRequest = errors.New("no such pending permission request")
	// ErrInvalidChoice is returned by Answer for a choice that selects none of
	// the request's options; the request stays pending.
	ErrInvalidChoice = errors.New("invalid permission choice")
	// ErrClosed is returned by Request after Close.
	ErrClosed = errors.New("permission broker closed")
	// ErrBadID is returned by Request when Config.NewID gives an empty id or
	// the id of a request still pending.
	ErrBadID = errors.New("empty or duplicate permission request id")
)

// Config configures a Broker. The zero Config is ready to use.
type Config struct {
	// Timeout is how long an asked request waits for an answer before it is
	// rejected (0 = DefaultTimeout).
	Timeout time.Duration
	// Now and After are the clock (nil = time.Now and time.After); tests
	// inject their own.
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
	// Logger receives decisions (nil = slog.Default()).
	Logger *slog.Logger
	// OnRequested is called, on the goroutine of Request, when a request
	// starts waiting for a person, before any answer can time out. The
	// request is already pending: the callback may call Answer.
	OnRequested func(Pending)
	// OnResolved is called, on the goroutine of Request, exactly once for
	// every request the broker accepted, with its audit record. After
	// OnRequested for the same request.
	OnResolved func(Record)
	// NewID returns a fresh request id (nil = 26 random base32 characters).
	NewID func() string
}

// Broker applies policies to permission requests and holds the ones that
// wait for a person. Its methods are safe for concurrent use. It starts no
// goroutines of its own: a waiting request blocks the goroutine that called
// Request. The callbacks must not call Close.
type Broker struct {
	timeout     time.Duration
	now         func() time.Time
	after       func(time.Duration) <-chan time.Time
	log         *slog.Logger
	onRequested func(Pending)
	onResolved  func(Record)
	newID       func() string

	wg sync.WaitGroup // Request calls in flight

	mu      sync.Mutex
	closed  bool
	pending map[string]*waiter          // by request id
	always  map[string]map[grant]string // session → remembered allow_always or reject_always
}

// grant is the (agent, action) of a remembered answer within a session.
type grant struct {
	agent  string
	action Action
}

// waiter is one pending request. res is written, under Broker.mu, by whoever
// removes the waiter from Broker.pending, just before done is closed.
type waiter struct {
	p    Pending
	done chan struct{}
	res  resolution
}

// resolution is how a request was decided.
type resolution struct {
	option    Option
	cancelled bool
	decision  Decision
	by        string
	note      string
	at        time.Time
}

// NewBroker returns a Broker configured by cfg, with defaults for its zero
// fields.
func NewBroker(cfg Config) *Broker {
	b := &Broker{
		timeout:     cmp.Or(cfg.Timeout, DefaultTimeout),
		now:         cfg.Now,
		after:       cfg.After,
		log:         cmp.Or(cfg.Logger, slog.Default()),
		onRequested: cfg.OnRequested,
		onResolved:  cfg.OnResolved,
		newID:       cfg.NewID,
		pending:     make(map[string]*waiter),
		always:      make(map[string]map[grant]string),
	}
	if b.timeout < 0 {
		b.timeout = DefaultTimeout
	}
	if b.now == nil {
		b.now = time.Now
	}
	if b.after == nil {
		b.after = time.After
	}
	if b.newID == nil {
		b.newID = rand.Text
	}
	return b
}

// Request decides req and returns the answer to give the agent. When the
// policy allows or denies, or the user already allowed or rejected the
// action always in this (session, agent), it returns at once. Otherwise it calls
// Config.OnRequested and blocks until Answer, the timeout (reject), a
// CancelSession of req.Session, Close, or the end of ctx (both cancelled).
//
// The error is non-nil only when the broker is closed (ErrClosed, with a
// cancelled Outcome that can still be sent) or Config.NewID failed (ErrBadID).
func (b *Broker) Request(ctx context.Context, req Request) (Outcome, error) {
	if req.Action == "" {
		req.Action = ActionFromToolKind(req.ToolKind)
	}
	req.RawInput = validJSON(req.RawInput)
	w := &waiter{p: Pending{Request: req, Risk: RiskOf(req.Action)}, done: make(chan struct{})}

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return Outcome{Cancelled: true, Decision: DecisionDeny, DecidedBy: DecidedByCancel, Note: noteClosed}, ErrClosed
	}
	id := b.newID()
	if _, dup := b.pending[id]; dup || id == "" {
		b.mu.Unlock()
		return Outcome{}, fmt.Errorf("request id %q: %w", id, ErrBadID)
	}
	b.wg.Add(1)
	defer b.wg.Done()
	now := b.now()
	w.p.ID, w.p.RequestedAt, w.p.Deadline = id, now, now.Add(b.timeout)
	res, decided := b.decideLocked(req)
	if !decided && ctx.Err() != nil {
		res, decided = cancelled(DecidedByCancel, contextNote(ctx)), true
	}
	if decided {
		res.at = now
	} else {
		b.pending[id] = w
	}
	b.mu.Unlock()

	if !decided {
		res = b.wait(ctx, w)
	}
	return b.finish(w.p, res), nil
}

// decideLocked decides req without asking, if it can.
func (b *Broker) decideLocked(req Request) (resolution, bool) {
	if len(req.Options) == 0 {
		return cancelled(DecidedByPolicy, noteNoOptions), true
	}
	switch d := req.Policy.Decide(req.Action); d {
	case DecisionAllow, DecisionDeny:
		return selectFor(req.Options, d, DecidedByPolicy, ""), true
	}
	switch b.always[req.Session][grant{req.Agent, req.Action}] {
	case KindAllowAlways:
		return selectFor(req.Options, DecisionAllow, DecidedByRemembered, ""), true
	case KindRejectAlways:
		return selectFor(req.Options, DecisionDeny, DecidedByRemembered, ""), true
	}
	return resolution{}, false
}

// wait blocks until w is resolved, resolving it itself on timeout or when ctx
// ends.
func (b *Broker) wait(ctx context.Context, w *waiter) resolution {
	timer := b.after(b.timeout)
	b.log.Info("permission requested", logKeyRequest, w.p.ID, logKeySession, w.p.Request.Session,
		logKeyAgent, w.p.Request.Agent, logKeyAction, w.p.Request.Action, logKeyRisk, w.p.Risk)
	if b.onRequested != nil {
		b.onRequested(w.p)
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		b.resolve(w, cancelled(DecidedByCancel, contextNote(ctx)))
	case <-timer:
		note := fmt.Sprintf("no answer within %s", b.timeout)
		b.resolve(w, selectFor(w.p.Request.Options, DecisionDeny, DecidedByTimeout, note))
	}
	<-w.done
	return w.res
}

// resolve resolves w with res unless it is already resolved.
func (b *Broker) resolve(w *waiter, res resolution) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.resolveLocked(w, res)
}

// resolveLocked resolves w with res and reports true, or reports false when w
// was resolved before: the first resolution wins.
func (b *Broker) resolveLocked(w *waiter, res resolution) bool {
	if b.pending[w.p.ID] != w {
		return false
	}
	delete(b.pending, w.p.ID)
	res.at = b.now()
	w.res = res
	close(w.done)
	return true
}

// finish turns a resolution into the Outcome and the Record, and reports it.
func (b *Broker) finish(p Pending, res resolution) Outcome {
	out := Outcome{
		RequestID:  p.ID,
		Cancelled:  res.cancelled,
		OptionID:   res.option.ID,
		OptionKind: res.option.Kind,
		Decision:   res.decision,
		DecidedBy:  res.by,
		Note:       res.note,
	}
	level := slog.LevelInfo
	if res.by == DecidedByPolicy || res.by == DecidedByRemembered {
		level = slog.LevelDebug
	}
	b.log.Log(context.Background(), level, "permission resolved", logKeyRequest, p.ID,
		logKeySession, p.Request.Session, logKeyAgent, p.Request.Agent, logKeyAction, p.Request.Action,
		logKeyDecision, res.decision, logKeyDecidedBy, res.by, logKeyOption, res.option.Kind, logKeyNote, res.note)
	if b.onResolved != nil {
		b.onResolved(Record{
			ID:          p.ID,
			Session:     p.Request.Session,
			Agent:       p.Request.Agent,
			Turn:        p.Request.Turn,
			Action:      p.Request.Action,
			Risk:        p.Risk,
			Request:     p.Request,
			Decision:    res.decision,
			DecidedBy:   res.by,
			OptionKind:  res.option.Kind,
			OptionID:    res.option.ID,
			Cancelled:   res.cancelled,
			Note:        res.note,
			RequestedAt: p.RequestedAt,
			DecidedAt:   res.at,
		})
	}
	return out
}

// Pending returns the requests of session that wait for an answer, oldest
// first; an empty session returns those of every session.
func (b *Broker) Pending(session string) []Pending {
	b.mu.Lock()
	var ps []Pending
	for _, w := range b.pending {
		if session == "" || w.p.Request.Session == session {
			ps = append(ps, w.p)
		}
	}
	b.mu.Unlock()
	slices.SortFunc(ps, func(x, y Pending) int {
		return cmp.Or(x.RequestedAt.Compare(y.RequestedAt), cmp.Compare(x.ID, y.ID))
	})
	return ps
}

// CancelSession answers every pending request of session with cancelled, as
// the spec requires after session/cancel, and returns how many it answered.
func (b *Broker) CancelSession(session string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, w := range b.pending {
		if w.p.Request.Session == session && b.resolveLocked(w, cancelled(DecidedByCancel, noteSessionCancelled)) {
			n++
		}
	}
	return n
}

// Forget drops the answers remembered for session; the pool calls it when
// the session closes.
func (b *Broker) Forget(session string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.always, session)
}

// Close answers every pending request with cancelled, makes later Requests
// fail with ErrClosed, and waits until every Request in flight has returned.
// It may be called more than once, but not from a callback of the broker.
func (b *Broker) Close() {
	b.mu.Lock()
	b.closed = true
	for _, w := range b.pending {
		b.resolveLocked(w, cancelled(DecidedByCancel, noteClosed))
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// cancelled is a resolution that answers the agent "cancelled".
func cancelled(by, note string) resolution {
	return resolution{cancelled: true, decision: DecisionDeny, by: by, note: note}
}

// selectFor selects the option that carries d, by kind; when the agent offers
// none, the request is answered cancelled and note says why.
func selectFor(opts []Option, d Decision, by, note string) resolution {
	kinds := kindsFor(d)
	if o, ok := pick(opts, kinds...); ok {
		return resolution{option: o, decision: d, by: by, note: note}
	}
	missing := fmt.Sprintf("%s decided, but the agent offered no %s or %s option: answered cancelled", d, kinds[0], kinds[1])
	if note != "" {
		missing = note + "; " + missing
	}
	return cancelled(by, missing)
}

// contextNote says why ctx ended.
func contextNote(ctx context.Context) string {
	return "request context ended: " + context.Cause(ctx).Error()
}

// validJSON returns raw, or raw as a JSON string when it is not valid JSON, so
// that records always marshal.
func validJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || json.Valid(raw) {
		return raw
	}
	s, _ := json.Marshal(string(raw))
	return s
}
