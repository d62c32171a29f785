package permission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestResolutionRace lets Answer, CancelSession, the context, the timeout and
// (sometimes) Close race for the same request: exactly one must win, and
// every reported artefact must agree on which.
func TestResolutionRace(t *testing.T) {
	const rounds = 300
	errRace := errors.New("raced")
	winners := map[string]int{}
	for i := range rounds {
		h := newHarness(t, Config{})
		ctx, cancel := context.WithCancelCause(context.Background())
		req := Request{Session: "s", Agent: "a", ToolKind: "execute", Options: agentOptions()}
		c := h.start(ctx, req)
		p := h.nextPending(t)

		withClose := i%4 == 0
		gate := make(chan struct{})
		var wg sync.WaitGroup
		var answerErr error
		var cancelled int
		wg.Go(func() { <-gate; answerErr = h.b.Answer("s", p.ID, KindAllowAlways) })
		wg.Go(func() { <-gate; cancelled = h.b.CancelSession("s") })
		wg.Go(func() { <-gate; cancel(errRace) })
		wg.Go(func() { <-gate; h.clock.Advance(DefaultTimeout) })
		if withClose {
			wg.Go(func() { <-gate; h.b.Close() })
		}
		close(gate)
		wg.Wait()
		got := c.wait(t)

		rs := h.recordsOf(p.ID)
		if len(rs) != 1 {
			t.Fatalf("round %d: %d records for %q; want exactly 1: %+v", i, len(rs), p.ID, rs)
		}
		r := rs[0]
		fromRecord := Outcome{RequestID: r.ID, Cancelled: r.Cancelled, OptionID: r.OptionID, OptionKind: r.OptionKind,
			Decision: r.Decision, DecidedBy: r.DecidedBy, Note: r.Note}
		if diff := cmp.Diff(got, fromRecord); diff != "" {
			t.Fatalf("round %d: outcome and record disagree (-outcome +record):\n%s", i, diff)
		}
		userWon := got.DecidedBy == DecidedByUser
		if userWon != (answerErr == nil) || (!userWon && !errors.Is(answerErr, ErrUnknownRequest)) {
			t.Fatalf("round %d: outcome %+v but Answer error = %v", i, got, answerErr)
		}
		if userWon && got.OptionKind != KindAllowAlways {
			t.Fatalf("round %d: user won with %+v; want allow_always", i, got)
		}
		if (cancelled == 1) != (got.Note == noteSessionCancelled) || cancelled > 1 {
			t.Fatalf("round %d: outcome %+v but CancelSession = %d", i, got, cancelled)
		}
		if got.DecidedBy == DecidedByTimeout && got.OptionKind != KindRejectOnce {
			t.Fatalf("round %d: timeout answered %+v; want reject_once", i, got)
		}
		if got.Note == noteClosed && !withClose {
			t.Fatalf("round %d: closed outcome %+v without Close", i, got)
		}
		if got.DecidedBy == DecidedByCancel && !got.Cancelled {
			t.Fatalf("round %d: cancel outcome %+v not cancelled", i, got)
		}
		if ps := h.b.Pending(""); len(ps) != 0 {
			t.Fatalf("round %d: Pending = %+v after resolution; want none", i, ps)
		}
		if !withClose {
			// The grant is remembered if and only if the answer won.
			ended, stop := context.WithCancel(context.Background())
			stop()
			again, err := h.b.Request(ended, req)
			if err != nil || (again.DecidedBy == DecidedByRemembered) != userWon {
				t.Fatalf("round %d: user won = %v, repeated request = %+v, %v", i, userWon, again, err)
			}
		}
		winner := got.DecidedBy
		if winner == DecidedByCancel {
			winner += " (" + strings.SplitN(got.Note, ":", 2)[0] + ")"
		}
		winners[winner]++
		h.b.Close()
	}
	t.Logf("winners over %d rounds: %v", rounds, winners)
}

// TestFirstResolutionWins answers inside OnRequested, then ends the context
// and fires the timer before Request reaches its select: all three are ready
// at once, and the answer, which came first, must still be the outcome.
func TestFirstResolutionWins(t *testing.T) {
	for i := range 50 {
		clock := newFakeClock()
		ctx, cancel := context.WithCancel(context.Background())
		var b *Broker
		var resolved []Record
		b = NewBroker(Config{
			Now: clock.Now, After: clock.After, Logger: slog.New(slog.DiscardHandler),
			OnRequested: func(p Pending) {
				if err := b.Answer(p.Request.Session, p.ID, KindAllowOnce); err != nil {
					t.Errorf("round %d: Answer error = %v", i, err)
				}
				cancel()
				clock.Advance(DefaultTimeout)
			},
			OnResolved: func(r Record) { resolved = append(resolved, r) },
		})
		got, err := b.Request(ctx, Request{Session: "s", Agent: "a", ToolKind: "execute", Options: agentOptions()})
		b.Close()
		if err != nil || got.DecidedBy != DecidedByUser || got.OptionKind != KindAllowOnce {
			t.Fatalf("round %d: Request = %+v, %v; want allow_once by the user, who answered first", i, got, err)
		}
		if len(resolved) != 1 || resolved[0].DecidedBy != DecidedByUser {
			t.Fatalf("round %d: records = %+v; want one decided by the user", i, resolved)
		}
	}
}

// TestConcurrentSessions runs many requests of several sessions at once
// against one answerer.
func TestConcurrentSessions(t *testing.T) {
	const sessions, perSession = 4, 50
	h := newHarness(t, Config{})
	var answerer sync.WaitGroup
	stop := make(chan struct{})
	answerer.Go(func() {
		for {
			select {
			case p := <-h.requested:
				if err := h.b.Answer(p.Request.Session, p.ID, "allow"); err != nil {
					t.Errorf("Answer(%q, %q, allow) error = %v", p.Request.Session, p.ID, err)
				}
			case <-stop:
				return
			}
		}
	})
	var wg sync.WaitGroup
	outcomes := make([][]Outcome, sessions)
	for s := range sessions {
		outcomes[s] = make([]Outcome, perSession)
		for i := range perSession {
			wg.Go(func() {
				out, err := h.b.Request(context.Background(), Request{Session: fmt.Sprint("s", s), Agent: "a",
					ToolKind: "edit", Options: agentOptions()})
				if err != nil {
					t.Errorf("Request error = %v", err)
				}
				outcomes[s][i] = out
			})
		}
	}
	wg.Wait()
	close(stop)
	answerer.Wait()
	seen := map[string]bool{}
	for s := range outcomes {
		for _, o := range outcomes[s] {
			if o.DecidedBy != DecidedByUser || o.OptionKind != KindAllowOnce || seen[o.RequestID] {
				t.Errorf("outcome %+v: want a distinct request allowed once by the user", o)
			}
			seen[o.RequestID] = true
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.records) != sessions*perSession {
		t.Errorf("%d records; want %d", len(h.records), sessions*perSession)
	}
}
