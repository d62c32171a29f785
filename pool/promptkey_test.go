package pool_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/pool"
)

// TestPromptKeySentTogether: copies of one keyed prompt sent at once (a
// client resending while its first copy is still being started) all get
// the one turn the first started, none ErrBusy; the session has one turn.
// A copy sent after the turn ended gets it too; the key sent with another
// prompt is refused, not taken for the first.
func TestPromptKeySentTogether(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, nil)
	s := e.session("fake")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const copies = 8
	ids := make([]int64, copies)
	errs := make([]error, copies)
	var wg sync.WaitGroup
	for i := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tn, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "once", Key: "k-1"})
			ids[i], errs[i] = tn.ID, err
		}()
	}
	wg.Wait()
	for i := range copies {
		if errs[i] != nil || ids[i] != ids[0] || ids[0] == 0 {
			t.Fatalf("copy %d = turn %d, %v; want every copy to get turn %d", i, ids[i], errs[i], ids[0])
		}
	}
	if _, err := e.p.WaitTurn(ctx, s.ID, ids[0]); err != nil {
		t.Fatal(err)
	}
	late, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "once", Key: "k-1"})
	if err != nil || late.ID != ids[0] {
		t.Errorf("a copy after the turn ended = turn %d, %v; want %d", late.ID, err, ids[0])
	}
	if _, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "another prompt", Key: "k-1"}); !errors.Is(err, pool.ErrInvalid) {
		t.Errorf("the key sent with another prompt: error = %v; want ErrInvalid", err)
	}
	turns, err := e.p.Turns(ctx, s.ID)
	if err != nil || len(turns) != 1 {
		t.Errorf("Turns = %d turns, %v; want 1", len(turns), err)
	}
}
