package pool_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// refuseAdoption is a store whose adoptions are queued and then refused,
// as a taken id or a full disk would have them.
type refuseAdoption struct{ pool.Store }

var errAdoptionRefused = errors.New("adoption refused for the test")

func (refuseAdoption) AdoptSession(context.Context, pool.SessionRecord, pool.Worktree, pool.AgentRecord, *backends.Advertised, backends.Event, func(backends.Event), *pool.Turn) (func(context.Context) error, error) {
	return func(context.Context) error { return errAdoptionRefused }, nil
}

// A create whose adoption of a spare the store refuses fails with the
// store's error and leaves no trace: no session in the pool or the store,
// nothing on the daemon-wide stream but the spare's discarding, its agent
// stopped and its worktree removed.
func TestRefusedAdoptionDiscardsTheSpare(t *testing.T) {
	e := newSpareEnv(t, 50*time.Millisecond, func(s pool.Store) pool.Store { return refuseAdoption{s} })
	var spare pool.SpareStatus
	for deadline := time.Now().Add(30 * time.Second); spare.State != "ready"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no ready spare; spares = %+v", e.p.Spares())
		}
		if ss := e.p.Spares(); len(ss) == 1 {
			spare = ss[0]
		}
	}
	sub := e.p.SubscribeAll()
	defer sub.Close()
	ctx := context.Background()
	if _, err := e.p.Create(ctx, pool.CreateRequest{Repo: e.repo, Agent: "fake"}); !errors.Is(err, errAdoptionRefused) {
		t.Fatalf("Create adopting a spare the store refuses = %v; want its error", err)
	}
	if _, err := e.p.Get(ctx, spare.ID); !errors.Is(err, pool.ErrNotFound) {
		t.Errorf("Get(%s) after the refused adoption = %v; want ErrNotFound", spare.ID, err)
	}
	if _, err := e.st.GetSession(ctx, spare.ID); err == nil {
		t.Errorf("the refused adoption's session %s is stored", spare.ID)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := os.Stat(spare.Worktree)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the discarded spare's worktree %s is still there (%v)", spare.Worktree, err)
		}
	}
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		evs, err := sub.Next(nctx, 100)
		if err != nil {
			t.Fatalf("no spare.discarded for the refused adoption: %v", err)
		}
		for _, ev := range evs {
			if ev.Session != spare.ID {
				continue
			}
			if ev.Type != pool.EventSpareDiscarded {
				t.Errorf("daemon-wide event %s of the refused adoption's session; want only spare.discarded", ev.Type)
				continue
			}
			if !strings.Contains(string(ev.Data), errAdoptionRefused.Error()) {
				t.Errorf("spare.discarded = %s; want the store's error as its reason", ev.Data)
			}
			return
		}
	}
}
