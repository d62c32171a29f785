package store

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// A session made from a spare is stored whole in one transaction: its
// row, its worktree and its agent with what it advertised; an id taken
// already stores nothing of it.
func TestAdoptSession(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		at := time.Date(2026, 11, 27, 1, 2, 3, 0, time.UTC)
		sess := Session{ID: "sp-abc", Repo: "/repo", Title: "adopted", ActiveAgent: "claude", CreatedAt: at}
		wt := WorktreeRow{SessionID: "sp-abc", Path: "/trees/sp-abc", Branch: "agentpool/sp-abc", BaseCommit: "c0ffee", CreatedAt: at}
		agent := AgentSession{SessionID: "sp-abc", Agent: "claude", Kind: "acp", PID: 42, PGID: 42, Status: "active", AgentSessionID: "as-1"}
		if err := s.AdoptSession(ctx, sess, wt, agent, []byte(`{"modes":["ask"]}`)); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetSession(ctx, "sp-abc")
		if err != nil || got.Title != "adopted" || got.Status != SessionOpen || !got.CreatedAt.Equal(at) {
			t.Errorf("session = %+v, %v", got, err)
		}
		if w, err := s.GetWorktree(ctx, "sp-abc"); err != nil || w.Path != wt.Path || w.BaseCommit != "c0ffee" {
			t.Errorf("worktree = %+v, %v", w, err)
		}
		if a, err := s.GetAgentSession(ctx, "sp-abc", "claude"); err != nil || a.PID != 42 || a.AgentSessionID != "as-1" {
			t.Errorf("agent = %+v, %v", a, err)
		}
		if adv, err := s.AgentAdvertised(ctx, "sp-abc", "claude"); err != nil || string(adv) != `{"modes":["ask"]}` {
			t.Errorf("advertised = %s, %v", adv, err)
		}
		// The id is taken: nothing of the second is stored, the first's
		// worktree is left as it was.
		wt2 := wt
		wt2.Path = "/elsewhere"
		if err := s.AdoptSession(ctx, sess, wt2, agent, nil); !errors.Is(err, ErrExists) {
			t.Errorf("AdoptSession of a taken id = %v; want ErrExists", err)
		}
		if w, _ := s.GetWorktree(ctx, "sp-abc"); w.Path != wt.Path {
			t.Errorf("worktree after the refused adoption = %q; want %q kept", w.Path, wt.Path)
		}
		if list, _ := s.ListSessions(ctx); len(list) != 1 {
			t.Errorf("sessions = %+v; want one", list)
		}
	})
}

// Hosts' heartbeats: a row per host, replaced whole, listed by id, and
// removed.
func TestHosts(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		at := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
		for _, h := range []Host{
			{ID: "b", Advertise: "http://127.0.0.1:2", Capacity: 8, StartedAt: at, HeartbeatAt: at},
			{ID: "a", Advertise: "http://127.0.0.1:1", Capacity: 16, Providers: []string{"claude"}, Warm: 1, Sessions: 2, Version: "v", StartedAt: at, HeartbeatAt: at},
			{ID: "a", Advertise: "http://127.0.0.1:1", Capacity: 16, Providers: []string{"claude", "codex"}, Warm: 3, Sessions: 4, Version: "v", StartedAt: at, HeartbeatAt: at.Add(time.Second)},
		} {
			if err := s.PutHost(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		list, err := s.ListHosts(ctx)
		if err != nil || len(list) != 2 || list[0].ID != "a" || list[1].ID != "b" {
			t.Fatalf("ListHosts = %+v, %v; want a and b", list, err)
		}
		a := list[0]
		if a.Warm != 3 || a.Sessions != 4 || !slices.Equal(a.Providers, []string{"claude", "codex"}) || !a.HeartbeatAt.Equal(at.Add(time.Second)) || !a.StartedAt.Equal(at) {
			t.Errorf("host a = %+v; want its last heartbeat", a)
		}
		if len(list[1].Providers) != 0 {
			t.Errorf("host b providers = %v; want none", list[1].Providers)
		}
		if err := s.RemoveHost(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if list, _ := s.ListHosts(ctx); len(list) != 1 || list[0].ID != "b" {
			t.Errorf("after removing a: %+v", list)
		}
		if err := s.PutHost(ctx, Host{}); err == nil {
			t.Error("PutHost without an id: no error")
		}
	})
}

// A queued adoption and the session's first event are one item of the
// writer's queue, so that the writer, however soon it wakes, commits them
// in one transaction; the event is delivered once both are durable, and
// Wait reports the adoption stored. Events appended after it follow.
func TestQueuedAdoptionCommitsWithTheFirstEvent(t *testing.T) {
	ctx := context.Background()
	// Each transaction's items of the adopted session: "rows" for the
	// adoption's statements, then the seq of the event the item carries.
	var mu sync.Mutex
	var txs [][]string
	cfg := fastRetry("")
	cfg.trace = func(step traceStep, items []item) {
		if step != stepBegin {
			return
		}
		var tx []string
		for i := range items {
			it := &items[i]
			if it.session() != "sp-q" {
				continue
			}
			var parts []string
			if it.w != nil && it.w.group != nil {
				parts = append(parts, "rows")
			}
			if it.hasEvent() {
				parts = append(parts, strconv.FormatInt(it.ev.Seq, 10))
			}
			tx = append(tx, strings.Join(parts, "+"))
		}
		mu.Lock()
		txs = append(txs, tx)
		mu.Unlock()
	}
	s, _ := openTest(t, cfg)
	delivered := make(chan struct{})
	ad, err := s.QueueAdoption(ctx, Session{ID: "sp-q", Repo: "/repo"}, WorktreeRow{SessionID: "sp-q", Path: "/trees/sp-q", Branch: "agentpool/sp-q"},
		AgentSession{SessionID: "sp-q", Agent: "demo", Kind: "acp", Status: "active"}, []byte(`{"modes":["ask"]}`),
		testEvent("sp-q", 1, time.Now()), func(backends.Event) { close(delivered) }, &Turn{Agent: "demo", Prompt: "go", CheckpointBefore: "tree0"})
	if err != nil {
		t.Fatalf("QueueAdoption() error = %v", err)
	}
	s.Append(testEvent("sp-q", 2, time.Now()))
	if err := ad.Wait(ctx); err != nil {
		t.Fatalf("Wait() = %v", err)
	}
	if err := s.AwaitDelivery(ctx, delivered); err != nil {
		t.Fatalf("AwaitDelivery() = %v", err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	first := slices.Clone(txs[0])
	mu.Unlock()
	if len(first) == 0 || first[0] != "rows+1" {
		t.Errorf("first transaction's items of the session = %q; want the rows and event 1 as one item first", first)
	}
	if evs, err := s.Events(ctx, "sp-q", 0, 0); err != nil || !slices.Equal(seqsOf(evs), []int64{1, 2}) {
		t.Errorf("events = %v, %v; want 1 and 2", seqsOf(evs), err)
	}
	if a, err := s.GetAgentSession(ctx, "sp-q", "demo"); err != nil || a.Status != "active" {
		t.Errorf("agent = %+v, %v", a, err)
	}
	if adv, err := s.AgentAdvertised(ctx, "sp-q", "demo"); err != nil || string(adv) != `{"modes":["ask"]}` {
		t.Errorf("advertised = %s, %v", adv, err)
	}
	if tr, err := s.GetTurn(ctx, "sp-q", 1); err != nil || tr.Prompt != "go" || tr.CheckpointBefore != "tree0" || tr.EndedAt != nil {
		t.Errorf("the first turn, stored with the adoption = %+v, %v; want turn 1 running", tr, err)
	}
}

// An adoption queued with its first turn stores that turn as number 1 in
// its transaction, on both engines; the session's next turn is 2.
func TestAdoptionWithItsFirstTurn(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		ad, err := s.QueueAdoption(ctx, Session{ID: "sp-t", Repo: "/repo"}, WorktreeRow{SessionID: "sp-t", Path: "/trees/sp-t", Branch: "agentpool/sp-t"},
			AgentSession{SessionID: "sp-t", Agent: "demo", Kind: "acp", Status: "active"}, nil,
			testEvent("sp-t", 1, time.Now()), nil, &Turn{SessionID: "ignored", Agent: "demo", Prompt: "first"})
		if err != nil {
			t.Fatalf("QueueAdoption() error = %v", err)
		}
		if err := ad.Wait(ctx); err != nil {
			t.Fatalf("Wait() = %v", err)
		}
		if tr, err := s.GetTurn(ctx, "sp-t", 1); err != nil || tr.Prompt != "first" || tr.Agent != "demo" {
			t.Fatalf("turn 1 = %+v, %v; want the first prompt's", tr, err)
		}
		n, err := s.StartTurn(ctx, Turn{SessionID: "sp-t", Agent: "demo", Prompt: "second"})
		if err != nil || n != 2 {
			t.Fatalf("StartTurn after the adoption = %d, %v; want 2", n, err)
		}
		if ts, err := s.ListTurns(ctx, "sp-t"); err != nil || len(ts) != 2 {
			t.Errorf("turns = %+v, %v; want 2", ts, err)
		}
	})
}

// An adoption the database refuses at its second statement stores none
// of it (its savepoint undoes the session's row) nor its first event, and
// the events appended after it are refused; the transaction's other
// writes are committed.
func TestRefusedAdoptionStoresNothing(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		mustSession(t, s, "other")
		// The worktree names a session that does not exist: its insert
		// fails after the session's row was inserted.
		ad, err := s.QueueAdoption(ctx, Session{ID: "sp-bad", Repo: "/repo"}, WorktreeRow{SessionID: "nobody", Path: "/trees/x", Branch: "b"},
			AgentSession{SessionID: "sp-bad", Agent: "demo", Kind: "acp", Status: "active"}, nil,
			testEvent("sp-bad", 1, time.Now()), func(ev backends.Event) { t.Errorf("first event of a refused adoption delivered: %+v", ev) },
			&Turn{Agent: "demo", Prompt: "first"})
		if err == nil {
			s.Append(testEvent("sp-bad", 2, time.Now()))
			s.Append(testEvent("other", 1, time.Now()))
			err = ad.Wait(ctx)
		}
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("adoption with a worktree of an unknown session = %v; want ErrNotFound", err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetSession(ctx, "sp-bad"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetSession of the refused adoption = %v; want ErrNotFound", err)
		}
		if evs, err := s.Events(ctx, "other", 0, 0); err != nil || len(evs) != 1 {
			t.Errorf("other session's events = %d, %v; want its one event", len(evs), err)
		}
		// An adoption under a taken id is refused with its first turn:
		// the session that has the id gets no turn.
		ad, err = s.QueueAdoption(ctx, Session{ID: "other", Repo: "/repo"}, WorktreeRow{SessionID: "other", Path: "/trees/o", Branch: "b"},
			AgentSession{SessionID: "other", Agent: "demo", Kind: "acp", Status: "active"}, nil,
			backends.Event{}, nil, &Turn{Agent: "demo", Prompt: "not mine"})
		if err == nil {
			err = ad.Wait(ctx)
		}
		if !errors.Is(err, ErrExists) {
			t.Fatalf("adoption under a taken id = %v; want ErrExists", err)
		}
		if ts, err := s.ListTurns(ctx, "other"); err != nil || len(ts) != 0 {
			t.Errorf("turns of the session whose id the adoption took = %+v, %v; want none", ts, err)
		}
	})
}
