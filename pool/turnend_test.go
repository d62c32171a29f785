package pool_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/store"
)

// turnEndedData is the part of a turn.ended's data these tests read.
type turnEndedData struct {
	Turn       int64      `json:"turn"`
	StopReason string     `json:"stop_reason"`
	Error      string     `json:"error"`
	Checkpoint string     `json:"checkpoint"`
	EndedAt    *time.Time `json:"ended_at"`
	Repaired   bool       `json:"repaired"`
}

// turnEnds groups the session's turn.ended events by turn.
func turnEnds(t *testing.T, evs []backends.Event) map[int64][]turnEndedData {
	t.Helper()
	out := map[int64][]turnEndedData{}
	for _, ev := range evs {
		if ev.Type != backends.EventTurnEnded {
			continue
		}
		var d turnEndedData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatalf("turn.ended data %s: %v", ev.Data, err)
		}
		if d.Turn != ev.Turn {
			t.Errorf("turn.ended of turn %d says turn %d", ev.Turn, d.Turn)
		}
		out[ev.Turn] = append(out[ev.Turn], d)
	}
	return out
}

// TestRecoverPublishesTurnEndedLostByAnEarlierVersion: an earlier version
// committed a turn's end row and its turn.ended apart, so a kill between
// the two left the turn ended in the store without its event. The next
// start publishes that turn.ended, once, marked repaired and carrying the
// stored end; a second restart publishes nothing more.
func TestRecoverPublishesTurnEndedLostByAnEarlierVersion(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, nil)
	s := e.session("fake")
	e.prompt(s.ID, "fake", "first")
	e.shutdown()

	// What the earlier version left: turn 2's row ended, no turn.ended.
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Path: e.dbPath})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	ended := started.Add(1500 * time.Millisecond)
	n, err := st.StartTurn(ctx, store.Turn{SessionID: s.ID, Agent: "fake", Prompt: "second", CheckpointBefore: "c1", StartedAt: started})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := st.NextSeq(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	st.Append(backends.Event{Session: s.ID, Seq: seq, Turn: n, Agent: "fake", Type: backends.EventTurnStarted, Time: started,
		Data: backends.MustJSON(map[string]any{"turn": n, "agent": "fake", "prompt": "second"})})
	if err := st.EndTurn(ctx, s.ID, n, store.TurnEnd{StopReason: "end_turn", CheckpointAfter: "c2", EndedAt: ended}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	for restart := 1; restart <= 2; restart++ {
		e.open()
		ends := turnEnds(t, e.events(s.ID))
		if got := ends[1]; len(got) != 1 || got[0].Repaired {
			t.Errorf("restart %d: turn.ended of turn 1 = %+v; want its one live event", restart, got)
		}
		got := ends[n]
		if len(got) != 1 {
			t.Fatalf("restart %d: turn %d has %d turn.ended events (%+v); want exactly 1", restart, n, len(got), got)
		}
		d := got[0]
		if !d.Repaired || d.StopReason != "end_turn" || d.Checkpoint != "c2" || d.Error != "" || d.EndedAt == nil || !d.EndedAt.Equal(ended) {
			t.Errorf("restart %d: repaired turn.ended = %+v; want repaired, end_turn, checkpoint c2, ended_at %v", restart, d, ended)
		}
		e.shutdown()
	}
	e.open()
	for _, ev := range e.events(s.ID) {
		if ev.Type == backends.EventTurnEnded && ev.Turn == n && !ev.Time.Equal(ended) {
			t.Errorf("repaired turn.ended time = %v; want the turn's end %v", ev.Time, ended)
		}
	}
}

// endWatch is a pool store that checks, before and after every write that
// can report a turn's end, what a kill at that moment would leave: once
// what is queued is committed, no turn of the session may be ended without
// its turn.ended.
type endWatch struct {
	pool.Store
	t  *testing.T
	st *store.Store
}

func (w *endWatch) check(session string) {
	if session == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.st.Flush(ctx); err != nil {
		w.t.Errorf("Flush: %v", err)
		return
	}
	turns, err := w.st.ListTurns(ctx, session)
	if err != nil {
		w.t.Errorf("ListTurns: %v", err)
		return
	}
	evs, err := w.st.Events(ctx, session, 0, 0)
	if err != nil {
		w.t.Errorf("Events: %v", err)
		return
	}
	reported := map[int64]bool{}
	for _, ev := range evs {
		if ev.Type == backends.EventTurnEnded {
			reported[ev.Turn] = true
		}
	}
	for _, tn := range turns {
		if tn.EndedAt != nil && !reported[tn.Number] {
			w.t.Errorf("turn %d of session %s is ended in the store (stop reason %q) without its turn.ended: a kill now loses it",
				tn.Number, session, tn.StopReason)
		}
	}
}

func (w *endWatch) Append(ev backends.Event, committed func(backends.Event)) {
	w.check(ev.Session)
	w.Store.Append(ev, committed)
	w.check(ev.Session)
}

func (w *endWatch) EndTurnEvent(ctx context.Context, t pool.Turn, ev backends.Event, committed func(backends.Event)) error {
	w.check(t.Session)
	err := w.Store.EndTurnEvent(ctx, t, ev, committed)
	w.check(t.Session)
	return err
}

// TestTurnEndCommittedWithItsEvent: every live end of a turn (run to its
// end, cancelled while running, cancelled while queued for a slot) commits
// the end row and turn.ended together, so that at no moment could a kill
// leave the row ended without its event.
func TestTurnEndCommittedWithItsEvent(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo), "slow": providerEntry(waitCancel)},
		func(c *pool.Config) { c.MaxWarm = 1 })
	e.wrapStore = func(s pool.Store) pool.Store { return &endWatch{Store: s, t: t, st: e.st} }
	e.shutdown()
	e.open()
	ctx := context.Background()
	done := e.create("fake", false)
	for _, text := range []string{"one", "two"} {
		if tn := e.prompt(done.ID, "fake", text); tn.StopReason != string(backends.StopEndTurn) {
			t.Fatalf("prompt %q stop reason = %q; want end_turn", text, tn.StopReason)
		}
	}
	running, queued := e.create("slow", false), e.create("slow", false)
	if _, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: running.ID, Text: "busy"}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent(running.ID, backends.EventMessageChunk)
	if tn, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: queued.ID, Text: "wait"}); err != nil || tn.QueuePosition == 0 {
		t.Fatalf("StartPrompt(%s) = %+v, %v; want it queued", queued.ID, tn, err)
	}
	for _, id := range []string{queued.ID, running.ID} {
		if err := e.p.Cancel(ctx, id); err != nil {
			t.Fatalf("Cancel(%s): %v", id, err)
		}
	}
	for id, turns := range map[string]int64{done.ID: 2, running.ID: 1, queued.ID: 1} {
		ends := turnEnds(t, e.events(id))
		for n := int64(1); n <= turns; n++ {
			if len(ends[n]) != 1 || ends[n][0].Repaired {
				t.Errorf("turn.ended of turn %d of %s = %+v; want one live event", n, id, ends[n])
			}
		}
	}
}
