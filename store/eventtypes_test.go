package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// TestEventsOfTypes: only the events of the types asked for, in seq
// order, with their turn, agent and data.
func TestEventsOfTypes(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		mustSession(t, s, "s1")
		types := []backends.EventType{backends.EventTurnStarted, backends.EventMessageChunk, backends.EventTurnEnded}
		for seq := int64(1); seq <= 9; seq++ {
			typ := types[(seq-1)%3]
			s.Append(backends.Event{Session: "s1", Seq: seq, Turn: (seq + 2) / 3, Agent: "a", Time: time.Now(), Type: typ,
				Data: backends.MustJSON(map[string]int64{"n": seq})})
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := s.EventsOfTypes(ctx, "s1", []string{string(backends.EventTurnStarted), string(backends.EventTurnEnded)})
		if err != nil {
			t.Fatal(err)
		}
		var seen string
		for _, ev := range got {
			seen += fmt.Sprintf("%d:%s:%d:%s ", ev.Seq, ev.Type, ev.Turn, ev.Data)
		}
		want := `1:turn.started:1:{"n":1} 3:turn.ended:1:{"n":3} 4:turn.started:2:{"n":4} 6:turn.ended:2:{"n":6} 7:turn.started:3:{"n":7} 9:turn.ended:3:{"n":9} `
		if seen != want {
			t.Errorf("EventsOfTypes = %s; want %s", seen, want)
		}
		if got, err := s.EventsOfTypes(ctx, "s1", nil); err != nil || len(got) != 0 {
			t.Errorf("EventsOfTypes(no type) = %v, %v; want none", got, err)
		}
	})
}
