package pool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// TestPromptRightAfterTurnEnded is a client that prompts the moment it
// reads turn.ended: the session must already be free, every time. The
// guarantee comes by construction (runTurn frees the session in the lock
// hold that gives turn.ended its seq, and readers get it only after the
// commit); in-process the reader wakes too slowly to catch the old order
// (it passed against it), so this guards against a gross regression, such
// as freeing the session only after slow work, not against a reordering
// by a few statements.
func TestPromptRightAfterTurnEnded(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(agenttest.Script{})}, nil)
	s := e.session("fake")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sub, err := e.p.Subscribe(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	const rounds = 50
	if _, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "round 0"}); err != nil {
		t.Fatal(err)
	}
	for ended := 0; ended < rounds; {
		evs, err := sub.Next(ctx, 0)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		for _, ev := range evs {
			if ev.Type != backends.EventTurnEnded {
				continue
			}
			ended++
			if ended == rounds {
				break
			}
			if _, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "next"}); err != nil {
				if errors.Is(err, pool.ErrBusy) {
					t.Fatalf("prompt right after turn.ended of turn %d: %v", ev.Turn, err)
				}
				t.Fatal(err)
			}
		}
	}
}
