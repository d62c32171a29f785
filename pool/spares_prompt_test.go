package pool_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// turnsSeen is a store that records how turns are stored: by StartTurn,
// or with an adoption.
type turnsSeen struct {
	pool.Store
	mu        sync.Mutex
	started   int      // StartTurn calls
	withAdopt []string // the prompts of turns stored with an adoption
}

func (s *turnsSeen) StartTurn(ctx context.Context, t pool.Turn) (int64, error) {
	s.mu.Lock()
	s.started++
	s.mu.Unlock()
	return s.Store.StartTurn(ctx, t)
}

func (s *turnsSeen) AdoptSession(ctx context.Context, r pool.SessionRecord, wt pool.Worktree, a pool.AgentRecord, adv *backends.Advertised, first backends.Event, committed func(backends.Event), turn *pool.Turn) (func(context.Context) error, error) {
	if turn != nil {
		s.mu.Lock()
		s.withAdopt = append(s.withAdopt, turn.Prompt)
		s.mu.Unlock()
	}
	return s.Store.AdoptSession(ctx, r, wt, a, adv, first, committed, turn)
}

// readySpare waits until e's pool has its one spare ready, and returns it.
func readySpare(t *testing.T, e *env) pool.SpareStatus {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ss := e.p.Spares(); len(ss) == 1 && ss[0].State == "ready" {
			return ss[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready spare; spares = %+v", e.p.Spares())
		}
	}
}

// A session created with its first prompt from a spare has that turn's
// row stored with the adoption (no StartTurn of its own), as turn 1,
// started when CreatePrompt returns; its events come in the usual order
// (session.created first, the spare's adoption, then the turn), the turn
// ends, and the session's next prompt is turn 2.
func TestCreatePromptStoresTheFirstTurnWithTheAdoption(t *testing.T) {
	var seen *turnsSeen
	e := newSpareEnv(t, 50*time.Millisecond, func(s pool.Store) pool.Store {
		seen = &turnsSeen{Store: s}
		return seen
	})
	spare := readySpare(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, first, turnErr, err := e.p.CreatePrompt(ctx, pool.CreateRequest{Repo: e.repo, Agent: "fake"}, "hello")
	if err != nil || turnErr != nil {
		t.Fatalf("CreatePrompt = %v, first turn %v", err, turnErr)
	}
	if s.ID != spare.ID {
		t.Fatalf("CreatePrompt made %s; want the spare %s adopted", s.ID, spare.ID)
	}
	if first.ID != 1 || !s.Busy || s.Turn != 1 || first.Prompt != "hello" {
		t.Errorf("CreatePrompt = session busy %v turn %d, first turn %+v; want turn 1 of \"hello\" running", s.Busy, s.Turn, first)
	}
	seen.mu.Lock()
	started, withAdopt := seen.started, slices.Clone(seen.withAdopt)
	seen.mu.Unlock()
	if started != 0 || !slices.Equal(withAdopt, []string{"hello"}) {
		t.Errorf("StartTurn calls = %d, turns stored with an adoption = %q; want none and [hello]", started, withAdopt)
	}
	end, err := e.p.WaitTurn(ctx, s.ID, 1)
	if err != nil || end.EndedAt == nil || end.Error != "" {
		t.Fatalf("WaitTurn(1) = %+v, %v; want it ended without error", end, err)
	}
	if st, err := e.st.GetTurn(ctx, s.ID, 1); err != nil || st.Prompt != "hello" || st.EndedAt == nil {
		t.Errorf("stored turn 1 = %+v, %v", st, err)
	}
	if next := e.prompt(s.ID, "", "next"); next.ID != 2 {
		t.Errorf("next prompt's turn = %d; want 2", next.ID)
	}
	var types []backends.EventType
	var chunkBeforeStart bool
	started1 := false
	for _, ev := range e.events(s.ID) {
		if ev.Turn > 1 {
			break
		}
		types = append(types, ev.Type)
		switch {
		case ev.Type == backends.EventTurnStarted:
			started1 = true
		case ev.Type == backends.EventMessageChunk && !started1:
			chunkBeforeStart = true
		}
	}
	want := []backends.EventType{backends.EventSessionCreated, backends.EventAgentReady, pool.EventSpareAdopted, backends.EventTurnStarted}
	var got []backends.EventType
	for _, ty := range types {
		if slices.Contains(want, ty) {
			got = append(got, ty)
		}
	}
	if !slices.Equal(got, want) || chunkBeforeStart || countType(e.events(s.ID), backends.EventTurnEnded) != 2 {
		t.Errorf("events of the adopted session up to turn 1 = %v; want %v in that order, chunks after turn.started, two turn.ended in all", types, want)
	}
}

// A create with its first prompt whose adoption the store refuses fails
// with the store's error: no session, and the turn that was to start
// with it is given up.
func TestCreatePromptRefusedAdoption(t *testing.T) {
	e := newSpareEnv(t, 50*time.Millisecond, func(s pool.Store) pool.Store { return refuseAdoption{s} })
	spare := readySpare(t, e)
	ctx := context.Background()
	if _, _, _, err := e.p.CreatePrompt(ctx, pool.CreateRequest{Repo: e.repo, Agent: "fake"}, "hello"); !errors.Is(err, errAdoptionRefused) {
		t.Fatalf("CreatePrompt adopting a spare the store refuses = %v; want its error", err)
	}
	if _, err := e.p.Get(ctx, spare.ID); !errors.Is(err, pool.ErrNotFound) {
		t.Errorf("Get(%s) after the refused adoption = %v; want ErrNotFound", spare.ID, err)
	}
	if ts, err := e.st.ListTurns(ctx, spare.ID); err != nil || len(ts) != 0 {
		t.Errorf("turns of the refused adoption = %+v, %v; want none", ts, err)
	}
	// Its turn, started during the commit, is cancelled and the spare
	// discarded: its worktree goes, and its agent with it.
	waitUntil(t, "the refused adoption's worktree removed", func() bool {
		_, err := os.Stat(spare.Worktree)
		return errors.Is(err, os.ErrNotExist)
	})
	waitUntil(t, "the refused adoption's agent stopped", func() bool {
		for _, b := range e.p.Backends() {
			if b.Session == spare.ID {
				return false
			}
		}
		return true
	})
	// The next create finds no spare of the refused one's and starts its
	// turn as without spares.
	s, first, turnErr, err := e.p.CreatePrompt(ctx, pool.CreateRequest{Repo: e.repo, Agent: "fake", Warm: new(bool)}, "hello")
	if err != nil || turnErr != nil || first.ID != 1 || s.ID == spare.ID {
		t.Fatalf("CreatePrompt without a spare = %s, %+v, %v, %v; want a new session running turn 1", s.ID, first, turnErr, err)
	}
	if _, err := e.p.WaitTurn(ctx, s.ID, 1); err != nil {
		t.Fatal(err)
	}
}
