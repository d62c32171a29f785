package pool_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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

// keyReads counts the store's reads of prompt keys, and can make the
// next StartTurn fail after it stored the turn (its answer lost).
type keyReads struct {
	pool.Store
	lists, byKey atomic.Int64
	loseNext     atomic.Bool
}

func (k *keyReads) TurnKeys(ctx context.Context, session string) (map[string]int64, error) {
	k.lists.Add(1)
	return k.Store.TurnKeys(ctx, session)
}

func (k *keyReads) TurnByKey(ctx context.Context, session, key string) (pool.Turn, error) {
	k.byKey.Add(1)
	return k.Store.TurnByKey(ctx, session, key)
}

func (k *keyReads) StartTurn(ctx context.Context, t pool.Turn) (int64, error) {
	id, err := k.Store.StartTurn(ctx, t)
	if err == nil && k.loseNext.CompareAndSwap(true, false) {
		return 0, errors.New("connection lost before the answer")
	}
	return id, err
}

// TestPromptKeysKeptWithTheSession: a keyed prompt does not ask the store
// whether its key started a turn each time: the session's keys are read
// once and noted as turns start. A key sent again gets its turn; after a
// StartTurn whose answer was lost (the turn may be stored), the keys are
// read again, so that the prompt sent again gets that turn, not a second.
func TestPromptKeysKeptWithTheSession(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, nil)
	reads := &keyReads{}
	e.wrapStore = func(s pool.Store) pool.Store { reads.Store = s; return reads }
	e.shutdown()
	e.open()
	s := e.session("fake")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prompt := func(text, key string) (pool.Turn, error) {
		tn, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: text, Key: key})
		if err != nil {
			return tn, err
		}
		return e.p.WaitTurn(ctx, s.ID, tn.ID)
	}
	for i, key := range []string{"k-1", "k-2", "k-3"} {
		if tn, err := prompt("p"+key, key); err != nil || tn.ID != int64(i+1) {
			t.Fatalf("prompt %s = turn %d, %v; want %d", key, tn.ID, err, i+1)
		}
	}
	if l, b := reads.lists.Load(), reads.byKey.Load(); l != 1 || b != 0 {
		t.Errorf("3 keyed prompts listed the keys %d times and read a turn by key %d times; want 1 and 0", l, b)
	}
	if tn, err := prompt("pk-2", "k-2"); err != nil || tn.ID != 2 {
		t.Errorf("k-2 sent again = turn %d, %v; want 2", tn.ID, err)
	}
	reads.loseNext.Store(true)
	if _, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "lost", Key: "k-4"}); err == nil {
		t.Fatal("StartPrompt with its answer lost succeeded")
	}
	tn, err := prompt("lost", "k-4")
	if err != nil || tn.ID != 4 {
		t.Errorf("k-4 sent again after its answer was lost = turn %d, %v; want turn 4, the one stored", tn.ID, err)
	}
	if l := reads.lists.Load(); l != 2 {
		t.Errorf("keys listed %d times; want twice (again after the lost answer)", l)
	}
	turns, err := e.p.Turns(ctx, s.ID)
	if err != nil || len(turns) != 4 {
		t.Errorf("Turns = %d turns, %v; want 4", len(turns), err)
	}
}
