package store

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/agentpool/agentpool/backends"
)

// turnEndedOf returns the turn.ended events of turn n in the session's
// stored events.
func turnEndedOf(t *testing.T, s *Store, session string, n int64) []backends.Event {
	t.Helper()
	evs, err := s.Events(context.Background(), session, 0, 0)
	if err != nil {
		t.Fatalf("Events(%s) error = %v", session, err)
	}
	var out []backends.Event
	for _, ev := range evs {
		if ev.Type == backends.EventTurnEnded && ev.Turn == n {
			out = append(out, ev)
		}
	}
	return out
}

// TestReportTurnEndRepairsOnce: a turn whose end row was committed without
// its turn.ended (as an earlier version could leave it) is listed by
// UnreportedTurnEnds, and reporting it stores one event, however many
// times the repair runs; turns ended with their event, and open turns, are
// never listed.
func TestReportTurnEndRepairsOnce(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		loc := e.db(t, Config{})
		s, logs := openTest(t, at(loc, Config{Now: clock.Now}))
		mustSession(t, s, "s1")
		start := func() int64 {
			t.Helper()
			n, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "p"})
			if err != nil {
				t.Fatalf("StartTurn error = %v", err)
			}
			return n
		}
		seq := int64(0)
		event := func(n int64, typ backends.EventType) backends.Event {
			seq++
			return backends.Event{Session: "s1", Seq: seq, Turn: n, Type: typ, Time: clock.Now()}
		}
		// Turn 1: the old split, its end row without its event.
		old := start()
		s.Append(event(old, backends.EventTurnStarted))
		ended := clock.Advance(time.Second)
		if err := s.EndTurn(ctx, "s1", old, TurnEnd{StopReason: "end_turn", CheckpointAfter: "c1", EndedAt: ended}); err != nil {
			t.Fatal(err)
		}
		// Turn 2: ended with its event, in one transaction.
		whole := start()
		s.Append(event(whole, backends.EventTurnStarted))
		if err := s.EndTurnEvent(ctx, whole, TurnEnd{StopReason: "end_turn"}, event(whole, backends.EventTurnEnded), nil); err != nil {
			t.Fatal(err)
		}
		// Turn 3: still open.
		open := start()
		s.Append(event(open, backends.EventTurnStarted))
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}

		repair := func(round int) {
			t.Helper()
			got, err := s.UnreportedTurnEnds(ctx)
			if err != nil {
				t.Fatalf("round %d: UnreportedTurnEnds() error = %v", round, err)
			}
			want := map[int]int{1: 1, 2: 0}[round]
			if len(got) != want {
				t.Fatalf("round %d: UnreportedTurnEnds() = %+v; want %d turn(s)", round, got, want)
			}
			for _, tn := range got {
				if tn.SessionID != "s1" || tn.Number != old || tn.StopReason != "end_turn" || tn.EndedAt == nil || !tn.EndedAt.Equal(ended) {
					t.Errorf("round %d: unreported turn = %+v; want turn %d of s1 ended at %v", round, tn, old, ended)
				}
				if err := s.ReportTurnEnd(ctx, tn.Number, event(tn.Number, backends.EventTurnEnded), nil); err != nil {
					t.Fatalf("round %d: ReportTurnEnd(%d) error = %v", round, tn.Number, err)
				}
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		repair(1)
		repair(2)
		if got := turnEndedOf(t, s, "s1", old); len(got) != 1 {
			t.Errorf("turn.ended of the repaired turn = %+v; want exactly one", got)
		}

		// Reporting again, as a second daemon racing the first would, stores
		// nothing and calls no hook; nor does reporting an open or unknown turn.
		called := 0
		hook := func(backends.Event) { called++ }
		rejected := s.Stats().Rejected
		for _, n := range []int64{old, whole, open, 99} {
			if err := s.ReportTurnEnd(ctx, n, event(n, backends.EventTurnEnded), hook); err != nil {
				t.Fatalf("ReportTurnEnd(%d) error = %v; want nil (the write is queued)", n, err)
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if called != 0 || s.Stats().Rejected != rejected+4 {
			t.Errorf("ReportTurnEnd of reported, open and unknown turns: %d hooks, %d rejected; want 0 and 4", called, s.Stats().Rejected-rejected)
		}
		for _, n := range []int64{old, whole} {
			if got := turnEndedOf(t, s, "s1", n); len(got) != 1 {
				t.Errorf("turn.ended of turn %d = %d events; want 1", n, len(got))
			}
		}
		if got := turnEndedOf(t, s, "s1", open); len(got) != 0 {
			t.Errorf("turn.ended of the open turn = %+v; want none", got)
		}
		if !strings.Contains(logs.String(), "already reported") {
			t.Errorf("log does not say why the reports were refused:\n%s", logs)
		}
		if err := s.ReportTurnEnd(ctx, old, event(old+1, backends.EventTurnEnded), nil); err == nil {
			t.Errorf("ReportTurnEnd with the event of another turn error = nil; want an error")
		}

		// What was repaired stays repaired after a restart.
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s2, _ := openTest(t, at(loc, Config{Now: clock.Now}))
		if got, err := s2.UnreportedTurnEnds(ctx); err != nil || len(got) != 0 {
			t.Errorf("UnreportedTurnEnds() after reopen = %+v, %v; want none", got, err)
		}
	})
}

// TestUnreportedTurnEndsUsesIndex: the startup check looks each turn's
// turn.ended up in an index, rather than scanning its session's events.
func TestUnreportedTurnEndsUsesIndex(t *testing.T) {
	s, _ := openTest(t, Config{})
	var plan []struct {
		ID      int    `db:"id"`
		Parent  int    `db:"parent"`
		NotUsed int    `db:"notused"`
		Detail  string `db:"detail"`
	}
	if err := s.db.SelectContext(context.Background(), &plan, `EXPLAIN QUERY PLAN `+unreportedTurnEndsSQL); err != nil {
		t.Fatal(err)
	}
	var details []string
	for _, p := range plan {
		details = append(details, p.Detail)
	}
	if got := strings.Join(details, "\n"); !strings.Contains(got, "USING COVERING INDEX events_turn_ended") &&
		!strings.Contains(got, "USING INDEX events_turn_ended") {
		t.Errorf("query plan of UnreportedTurnEnds:\n%s\nwant a lookup in index events_turn_ended", got)
	}
}

// TestFullErrorNamesTheDatabase: a write that fails on a full disk says
// which database file's disk it is, and is ErrFull and ENOSPC.
func TestFullErrorNamesTheDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentpool.db")
	s, _ := openTest(t, Config{Path: path})
	err := s.mapWriteErr(sqlite3.Error{Code: sqlite3.ErrFull})
	if !errors.Is(err, ErrFull) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) {
		t.Errorf("mapWriteErr(SQLITE_FULL) = %v; want ErrFull and ENOSPC naming %s", err, path)
	}
}
