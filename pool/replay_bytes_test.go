package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// A reader replaying a session from its first event reads the store in
// pages of at most about 4 MiB (and one event), even when its estimate of
// the events' size is far off: here the ring holds hundreds of small
// chunks after the 1 MiB updates, so the mean size it goes by first is a
// few KiB, and a page counted by events alone would hold hundreds of MiB.
func TestReplayOfBigUpdatesIsPagedByBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("sends tens of MiB of updates")
	}
	const size = 1 << 20
	updates := 120
	if raceDetector {
		updates = 40
	}
	steps := make([]agenttest.Step, 0, updates+1)
	for range updates {
		steps = append(steps, agenttest.Step{BigLine: size})
	}
	steps = append(steps, agenttest.Step{Chunks: 2000})
	script := agenttest.Script{Turns: []agenttest.Turn{{Steps: steps}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(script)}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := e.session("fake")
	if tn, err := e.p.Prompt(ctx, pool.PromptRequest{Session: s.ID, Text: "flood"}); err != nil || tn.StopReason != "end_turn" {
		t.Fatalf("Prompt = %+v, %v; want end_turn", tn, err)
	}
	cur, err := e.p.Get(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := e.p.Subscribe(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var big, most int
	for last := int64(0); last < cur.LastSeq; {
		page, err := sub.Next(ctx, 0)
		if err != nil {
			t.Fatalf("Next after seq %d: %v", last, err)
		}
		held := 0
		for _, ev := range page {
			held += cap(ev.Data)
			if len(ev.Data) > size {
				big++
			}
		}
		most = max(most, held)
		last = page[len(page)-1].Seq
	}
	if big != updates {
		t.Errorf("replay read %d updates of 1 MiB; want %d", big, updates)
	}
	const limit = 4<<20 + 2*size
	if most > limit {
		t.Errorf("a page of the replay held %.1f MiB of event data; want at most %.1f MiB", float64(most)/(1<<20), float64(limit)/(1<<20))
	}
	t.Logf("replay of %d updates of 1 MiB: at most %.1f MiB of event data in a page", updates, float64(most)/(1<<20))
}
