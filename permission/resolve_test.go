package permission

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAllowAlwaysRemembered(t *testing.T) {
	h := newHarness(t, Config{})
	req := func(session, agent, kind string) Request {
		return Request{Session: session, Agent: agent, ToolKind: kind, Options: agentOptions()}
	}
	// mustAsk checks that r waits for a person, then cancels it.
	mustAsk := func(t *testing.T, r Request) {
		t.Helper()
		c, _ := h.ask(t, r)
		if n := h.b.CancelSession(r.Session); n != 1 {
			t.Fatalf("CancelSession(%q) = %d; want 1", r.Session, n)
		}
		c.wait(t)
	}
	answer := func(t *testing.T, r Request, choice string) Outcome {
		t.Helper()
		c, p := h.ask(t, r)
		if err := h.b.Answer(r.Session, p.ID, choice); err != nil {
			t.Fatalf("Answer(%q, %q, %q) error = %v; want nil", r.Session, p.ID, choice, err)
		}
		return c.wait(t)
	}

	if got := answer(t, req("s1", "claude", "execute"), KindAllowAlways); got.OptionID != "proceed_always" || got.OptionKind != KindAllowAlways {
		t.Fatalf("allow_always answer forwarded %+v; want the agent's allow_always option", got)
	}
	if got := answer(t, req("s1", "claude", "delete"), KindAllowOnce); got.OptionKind != KindAllowOnce {
		t.Fatalf("allow_once answer forwarded %+v; want allow_once", got)
	}

	// An ended context makes a request that would ask return at once, so a
	// missing grant fails the test instead of hanging it.
	ended, end := context.WithCancel(context.Background())
	end()
	got, err := h.b.Request(ended, req("s1", "claude", "execute"))
	if err != nil || got.DecidedBy != DecidedByRemembered || got.OptionID != "proceed_once" || got.Decision != DecisionAllow {
		t.Fatalf("repeated request = %+v, %v; want allow_once decided by remembered", got, err)
	}
	if rs := h.recordsOf(got.RequestID); len(rs) != 1 || rs[0].DecidedBy != DecidedByRemembered {
		t.Errorf("records of %q = %+v; want one decided by remembered", got.RequestID, rs)
	}

	t.Run("allow_once is not remembered", func(t *testing.T) { mustAsk(t, req("s1", "claude", "delete")) })
	t.Run("other action asks", func(t *testing.T) { mustAsk(t, req("s1", "claude", "edit")) })
	t.Run("other agent asks", func(t *testing.T) { mustAsk(t, req("s1", "gemini", "execute")) })
	t.Run("other session asks", func(t *testing.T) { mustAsk(t, req("s2", "claude", "execute")) })
	t.Run("policy deny beats memory", func(t *testing.T) {
		r := req("s1", "claude", "execute")
		r.Policy = Policy{Rules: map[Action]Decision{ActionExecute: DecisionDeny}}
		got, err := h.b.Request(ended, r)
		if err != nil || got.DecidedBy != DecidedByPolicy || got.Decision != DecisionDeny {
			t.Errorf("Request = %+v, %v; want deny by policy", got, err)
		}
	})
	t.Run("forget", func(t *testing.T) {
		h.b.Forget("s2")
		if got, _ := h.b.Request(ended, req("s1", "claude", "execute")); got.DecidedBy != DecidedByRemembered {
			t.Fatalf("after Forget(s2), s1 request = %+v; want still remembered", got)
		}
		h.b.Forget("s1")
		mustAsk(t, req("s1", "claude", "execute"))
	})
}

func TestTimeout(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		options []Option
		want    Outcome
		noteHas string
	}{
		{"default timeout rejects once", 0, agentOptions(),
			Outcome{OptionID: "allow_once", OptionKind: KindRejectOnce, Decision: DecisionDeny, DecidedBy: DecidedByTimeout}, "no answer within 5m0s"},
		{"configured timeout falls back to reject_always", 30 * time.Second, onlyKinds(KindAllowOnce, KindRejectAlways),
			Outcome{OptionID: "reject_once", OptionKind: KindRejectAlways, Decision: DecisionDeny, DecidedBy: DecidedByTimeout}, "no answer within 30s"},
		{"no reject option is cancelled", time.Minute, onlyKinds(KindAllowOnce),
			Outcome{Cancelled: true, Decision: DecisionDeny, DecidedBy: DecidedByTimeout}, "no reject_once or reject_always option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{Timeout: tt.timeout})
			wantTimeout := tt.timeout
			if wantTimeout == 0 {
				wantTimeout = DefaultTimeout
			}
			start := h.clock.Now()
			c, p := h.ask(t, Request{Session: "s1", Agent: "a", ToolKind: "other", Options: tt.options})
			if !p.Deadline.Equal(start.Add(wantTimeout)) {
				t.Errorf("Pending.Deadline = %v; want %v", p.Deadline, start.Add(wantTimeout))
			}
			h.clock.Advance(wantTimeout - time.Nanosecond)
			if !c.running() || len(h.b.Pending("s1")) != 1 {
				t.Fatalf("request resolved %s before its timeout", time.Nanosecond)
			}
			h.clock.Advance(time.Nanosecond)
			got := c.wait(t)
			want := tt.want
			want.RequestID = p.ID
			want.Note = got.Note
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("timed out outcome mismatch (-want +got):\n%s", diff)
			}
			if !strings.Contains(got.Note, tt.noteHas) {
				t.Errorf("Note = %q; want it to contain %q", got.Note, tt.noteHas)
			}
			rs := h.recordsOf(p.ID)
			if len(rs) != 1 || rs[0].DecidedBy != DecidedByTimeout || !rs[0].DecidedAt.Equal(start.Add(wantTimeout)) {
				t.Errorf("records = %+v; want one timeout decided at %v", rs, start.Add(wantTimeout))
			}
			h.clock.mu.Lock()
			durations := h.clock.durations
			h.clock.mu.Unlock()
			if diff := cmp.Diff([]time.Duration{wantTimeout}, durations); diff != "" {
				t.Errorf("timers started mismatch (-want +got):\n%s", diff)
			}
			if err := h.b.Answer("s1", p.ID, "allow"); !errors.Is(err, ErrUnknownRequest) {
				t.Errorf("Answer after timeout error = %v; want ErrUnknownRequest", err)
			}
		})
	}
}

// TestDefaultClockTimeout runs the real-time defaults inside a synctest bubble.
func TestDefaultClockTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(Config{Logger: slog.New(slog.DiscardHandler)})
		defer b.Close()
		start := time.Now()
		var got Outcome
		var wg sync.WaitGroup
		wg.Go(func() {
			got, _ = b.Request(context.Background(), Request{Session: "s", Agent: "a", ToolKind: "execute", Options: agentOptions()})
		})
		time.Sleep(DefaultTimeout - time.Nanosecond)
		synctest.Wait()
		if ps := b.Pending("s"); len(ps) != 1 || !ps[0].Deadline.Equal(start.Add(DefaultTimeout)) {
			t.Fatalf("Pending(s) just before the timeout = %+v; want one with deadline %v", ps, start.Add(DefaultTimeout))
		}
		time.Sleep(time.Nanosecond)
		wg.Wait()
		if got.DecidedBy != DecidedByTimeout || got.OptionKind != KindRejectOnce {
			t.Errorf("Request = %+v; want reject_once by timeout", got)
		}
	})
}

func TestCancelSession(t *testing.T) {
	h := newHarness(t, Config{})
	var s1 []*call
	for range 3 {
		c, _ := h.ask(t, Request{Session: "s1", Agent: "a", ToolKind: "edit", Options: agentOptions()})
		s1 = append(s1, c)
	}
	other, op := h.ask(t, Request{Session: "s2", Agent: "a", ToolKind: "edit", Options: agentOptions()})
	if n := h.b.CancelSession("s1"); n != 3 {
		t.Fatalf("CancelSession(s1) = %d; want 3", n)
	}
	for i, c := range s1 {
		got := c.wait(t)
		if !got.Cancelled || got.DecidedBy != DecidedByCancel || got.Decision != DecisionDeny || got.OptionID != "" || got.Note != noteSessionCancelled {
			t.Errorf("request %d of s1 = %+v; want cancelled by session cancel", i, got)
		}
		if rs := h.recordsOf(got.RequestID); len(rs) != 1 || !rs[0].Cancelled {
			t.Errorf("records of %q = %+v; want one cancelled", got.RequestID, rs)
		}
	}
	if n := h.b.CancelSession("s1"); n != 0 {
		t.Errorf("second CancelSession(s1) = %d; want 0", n)
	}
	if ps := h.b.Pending("s2"); len(ps) != 1 || ps[0].ID != op.ID || !other.running() {
		t.Fatalf("Pending(s2) = %+v; want %q untouched by CancelSession(s1)", ps, op.ID)
	}
	if n := h.b.CancelSession("s2"); n != 1 {
		t.Errorf("CancelSession(s2) = %d; want 1", n)
	}
	other.wait(t)
}

func TestContextEnds(t *testing.T) {
	cause := errors.New("turn aborted")
	t.Run("while waiting", func(t *testing.T) {
		h := newHarness(t, Config{})
		ctx, cancel := context.WithCancelCause(context.Background())
		c := h.start(ctx, Request{Session: "s", Agent: "a", ToolKind: "move", Options: agentOptions()})
		p := h.nextPending(t)
		cancel(cause)
		got := c.wait(t)
		if !got.Cancelled || got.DecidedBy != DecidedByCancel || !strings.Contains(got.Note, cause.Error()) {
			t.Errorf("Request = %+v; want cancelled with note naming %q", got, cause)
		}
		if ps := h.b.Pending("s"); len(ps) != 0 {
			t.Errorf("Pending(s) = %+v; want %q removed", ps, p.ID)
		}
	})
	t.Run("already ended never asks", func(t *testing.T) {
		h := newHarness(t, Config{})
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		got, err := h.b.Request(ctx, Request{Session: "s", Agent: "a", ToolKind: "move", Options: agentOptions()})
		if err != nil || !got.Cancelled || got.DecidedBy != DecidedByCancel {
			t.Errorf("Request = %+v, %v; want cancelled", got, err)
		}
		if len(h.requested) != 0 {
			t.Errorf("OnRequested called for a request whose context had ended")
		}
		if rs := h.recordsOf(got.RequestID); len(rs) != 1 {
			t.Errorf("records = %+v; want one", rs)
		}
	})
	t.Run("ended context still gets a policy decision", func(t *testing.T) {
		h := newHarness(t, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		got, err := h.b.Request(ctx, Request{Session: "s", Agent: "a", ToolKind: "read", Options: agentOptions()})
		if err != nil || got.DecidedBy != DecidedByPolicy || got.Decision != DecisionAllow {
			t.Errorf("Request = %+v, %v; want allow by policy", got, err)
		}
	})
}

func TestClose(t *testing.T) {
	h := newHarness(t, Config{})
	var calls []*call
	for _, s := range []string{"s1", "s2"} {
		c, _ := h.ask(t, Request{Session: s, Agent: "a", ToolKind: "execute", Options: agentOptions()})
		calls = append(calls, c)
	}
	h.b.Close()
	h.mu.Lock()
	n := len(h.records)
	h.mu.Unlock()
	if n != 2 {
		t.Fatalf("after Close, %d records; want 2 (Close waits for the requests in flight)", n)
	}
	for _, c := range calls {
		if got := c.wait(t); !got.Cancelled || got.Note != noteClosed {
			t.Errorf("Request = %+v; want cancelled by close", got)
		}
	}
	got, err := h.b.Request(context.Background(), Request{Session: "s1", Agent: "a", ToolKind: "read", Options: agentOptions()})
	if !errors.Is(err, ErrClosed) || !got.Cancelled {
		t.Errorf("Request after Close = %+v, %v; want a cancelled outcome and ErrClosed", got, err)
	}
	h.b.Close()
}

func TestBadID(t *testing.T) {
	for _, tt := range []struct {
		name string
		ids  []string
	}{
		{"empty", []string{""}},
		{"duplicate of a pending request", []string{"same", "same"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			i := 0
			h := newHarness(t, Config{NewID: func() string { i++; return tt.ids[i-1] }})
			for range len(tt.ids) - 1 {
				h.ask(t, Request{Session: "s", Agent: "a", ToolKind: "edit", Options: agentOptions()})
			}
			if _, err := h.b.Request(context.Background(), Request{Session: "s", Agent: "a", ToolKind: "read", Options: agentOptions()}); !errors.Is(err, ErrBadID) {
				t.Errorf("Request with id %q error = %v; want ErrBadID", tt.ids[len(tt.ids)-1], err)
			}
		})
	}
}

func TestPendingOrder(t *testing.T) {
	h := newHarness(t, Config{})
	var want []string
	for i, s := range []string{"s1", "s2", "s1"} {
		_, p := h.ask(t, Request{Session: s, Agent: "a", ToolKind: "edit", Options: agentOptions()})
		if s == "s1" {
			want = append(want, p.ID)
		}
		if i < 2 {
			h.clock.Advance(time.Second)
		}
	}
	var got []string
	for _, p := range h.b.Pending("s1") {
		got = append(got, p.ID)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Pending(s1) ids mismatch (-want +got):\n%s", diff)
	}
	if n := len(h.b.Pending("")); n != 3 {
		t.Errorf("len(Pending(\"\")) = %d; want 3", n)
	}
	if ps := h.b.Pending("s3"); len(ps) != 0 {
		t.Errorf("Pending(s3) = %+v; want none", ps)
	}
}

func TestRecordMarshalsInvalidRawInput(t *testing.T) {
	h := newHarness(t, Config{})
	got, err := h.b.Request(context.Background(), Request{Session: "s", Agent: "a", ToolKind: "read",
		RawInput: json.RawMessage(`{"path": oops`), Options: agentOptions()})
	if err != nil {
		t.Fatalf("Request error = %v", err)
	}
	rs := h.recordsOf(got.RequestID)
	if len(rs) != 1 {
		t.Fatalf("records = %+v; want one", rs)
	}
	b, err := json.Marshal(rs[0])
	if err != nil {
		t.Fatalf("json.Marshal(record) error = %v; want nil", err)
	}
	if !strings.Contains(string(b), `"raw_input":"{\"path\": oops"`) {
		t.Errorf("json.Marshal(record) = %s; want the invalid raw input kept as a string", b)
	}
}
