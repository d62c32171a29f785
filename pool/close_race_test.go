package pool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// agentsMarked returns the live processes whose environment contains
// marker: the fake agents of scripts whose AgentName is marker (the script
// travels in the agent's environment), whether the pool knows them or not.
func agentsMarked(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte(marker)) {
			continue
		}
		if st, err := agenttest.ReadProcStat(pid); err != nil || st.State == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// waitAgentsGone waits a little for the marked agents to be gone and
// returns those still alive.
func waitAgentsGone(marker string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		pids := agentsMarked(marker)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCloseRacingPromptsLeavesNoAgent closes sessions while prompts keep
// arriving on them: every prompt gets a turn or ErrClosed, every accepted
// turn ends (never on a missing worktree), and no agent process of the
// sessions outlives their Close.
func TestCloseRacingPromptsLeavesNoAgent(t *testing.T) {
	marker := fmt.Sprintf("close-race-%d-%d", os.Getpid(), time.Now().UnixNano())
	script := agenttest.Script{AgentName: marker, Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "working"}, {SleepMs: 30}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(script)}, nil)
	const sessions, prompters = 8, 4
	var ids []string
	for range sessions {
		ids = append(ids, e.session("fake").ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var turns, closedErrs, busy atomic.Int64
	var mu sync.Mutex
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		for range prompters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					tn, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: id, Text: "x"})
					switch {
					case err == nil:
						turns.Add(1)
						done, err := e.p.WaitTurn(ctx, id, tn.ID)
						if err != nil {
							problem("WaitTurn(%s, %d) error = %v; want the turn's end", id, tn.ID, err)
							return
						}
						if done.EndedAt == nil || strings.Contains(done.Error, "worktree") {
							problem("turn %d of %s ended %+v; want an end that is not about the worktree", tn.ID, id, done)
						}
					case errors.Is(err, pool.ErrClosed):
						closedErrs.Add(1)
						return
					case errors.Is(err, pool.ErrBusy):
						busy.Add(1) // another prompter's turn runs: try again
						time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					default:
						problem("StartPrompt(%s) error = %v; want a turn or ErrClosed", id, err)
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond) // during a first start or after some turns
			if _, err := e.p.Close(ctx, id, true); err != nil {
				problem("Close(%s) error = %v; want nil", id, err)
			}
		}()
	}
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d sessions × %d prompters: %d turns, %d ErrClosed, %d ErrBusy retries", sessions, prompters, turns.Load(), closedErrs.Load(), busy.Load())
	if n := closedErrs.Load(); n != sessions*prompters {
		t.Errorf("%d prompters ended with ErrClosed; want all %d", n, sessions*prompters)
	}
	for _, b := range e.p.Backends() {
		t.Errorf("backend of a closed session still held: %+v", b)
	}
	if pids := waitAgentsGone(marker, 5*time.Second); len(pids) > 0 {
		t.Errorf("%d agent processes of the closed sessions still alive: %v", len(pids), pids)
	}
}

// TestShutdownRespectsItsDeadline shuts a pool down with a 1 s context
// while turns hang ignoring their cancel, their agents ignore SIGTERM, and
// another agent hangs in its handshake (a 60 s start timeout): Shutdown
// returns soon after the deadline and no agent process remains.
func TestShutdownRespectsItsDeadline(t *testing.T) {
	marker := fmt.Sprintf("shutdown-deadline-%d-%d", os.Getpid(), time.Now().UnixNano())
	hang := agenttest.Script{AgentName: marker, IgnoreSIGTERM: true,
		Turns: []agenttest.Turn{{IgnoreCancel: true, Steps: []agenttest.Step{{Chunk: "working"}, {WaitCancel: true}}}}}
	stuck := agenttest.Script{AgentName: marker + "-start", IgnoreSIGTERM: true, HangOnInitialize: true}
	e := newEnv(t, map[string]any{"hang": providerEntry(hang), "stuck": providerEntry(stuck)}, func(c *pool.Config) {
		c.StartTimeout = time.Minute
	})
	ctx := context.Background()
	var turns []pool.Turn
	var ids []string
	for range 3 {
		s := e.session("hang")
		sub, err := e.p.Subscribe(ctx, s.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		tn, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "hang"})
		if err != nil {
			t.Fatal(err)
		}
		nextOfType(t, sub, backends.EventMessageChunk) // the turn runs
		sub.Close()
		turns, ids = append(turns, tn), append(ids, s.ID)
	}
	starting := e.session("stuck")
	warmErr := make(chan error, 1)
	go func() { warmErr <- e.p.Warm(ctx, starting.ID, "") }()
	waitUntil(t, "the stuck agent's process", func() bool { return len(agentsMarked(marker+"-start")) > 0 })
	if n := len(agentsMarked(marker)); n != 4 {
		t.Fatalf("%d agent processes before Shutdown; want 4", n)
	}

	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	begin := time.Now()
	err := e.p.Shutdown(sctx)
	took := time.Since(begin)
	t.Logf("Shutdown with a 1 s deadline returned after %v (err: %v)", took.Round(time.Millisecond), err)
	// Generous: the bound is the deadline plus pool.ShutdownKillWait.
	if limit := time.Second + pool.ShutdownKillWait + 5*time.Second; took > limit {
		t.Errorf("Shutdown took %v; want it to return within %v of a 1 s deadline", took, limit)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown error = %v; want nil or one caused by the deadline", err)
	}
	select {
	case err := <-warmErr:
		if !errors.Is(err, pool.ErrClosed) {
			t.Errorf("Warm of the agent stuck starting = %v; want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Warm of the agent stuck starting did not return after Shutdown")
	}
	for i, tn := range turns {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		done, err := e.p.WaitTurn(wctx, ids[i], tn.ID)
		wcancel()
		if err != nil || done.EndedAt == nil {
			t.Errorf("hung turn %d after Shutdown = %+v, %v; want it ended", tn.ID, done, err)
		}
	}
	pids := agentsMarked(marker)
	t.Logf("agent processes right after Shutdown returned: %d", len(pids))
	if pids = waitAgentsGone(marker, 5*time.Second); len(pids) > 0 {
		t.Errorf("%d agent processes alive after Shutdown: %v", len(pids), pids)
	}
}
