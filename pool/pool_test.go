package pool_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
)

var echo = agenttest.Script{LoadSession: true}

func TestWarmReuseAndEvents(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, nil)
	s := e.session("fake")
	for i := 0; i < 3; i++ {
		tn := e.prompt(s.ID, "", "hello")
		if tn.StopReason != "end_turn" || tn.Error != "" || tn.CheckpointBefore == "" || tn.CheckpointAfter == "" {
			t.Fatalf("turn %d = %+v", i, tn)
		}
	}
	if n := e.p.Stats().Spawns; n != 1 {
		t.Fatalf("spawns = %d; want 1 for 3 prompts", n)
	}
	evs := e.events(s.ID)
	for i, ev := range evs {
		if ev.Seq != int64(i+1) || ev.Session != s.ID {
			t.Fatalf("event %d has seq %d session %q", i, ev.Seq, ev.Session)
		}
	}
	if countType(evs, backends.EventTurnStarted) != 3 || countType(evs, backends.EventTurnEnded) != 3 || countType(evs, backends.EventAgentReady) != 1 {
		t.Errorf("event types: %v", typesOf(evs))
	}
	turns, err := e.p.Turns(context.Background(), s.ID)
	if err != nil || len(turns) != 3 {
		t.Fatalf("Turns = %d, %v", len(turns), err)
	}
}

func typesOf(evs []backends.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, string(ev.Type))
	}
	return out
}

func TestSwitchAgentAndBack(t *testing.T) {
	e := newEnv(t, map[string]any{"a": providerEntry(echo), "b": providerEntry(echo)}, nil)
	s := e.session("a")
	e.prompt(s.ID, "", "one")
	e.prompt(s.ID, "b", "two")
	got, _ := e.p.Get(context.Background(), s.ID)
	if got.ActiveAgent != "b" {
		t.Errorf("ActiveAgent = %q; want b", got.ActiveAgent)
	}
	e.prompt(s.ID, "a", "three")
	e.prompt(s.ID, "b", "four")
	if n := e.p.Stats().Spawns; n != 2 {
		t.Fatalf("spawns = %d; want 2 (each agent once)", n)
	}
	idle := 0
	for _, b := range e.p.Backends() {
		if b.Session == s.ID && b.State == pool.StateIdle && b.PID != 0 {
			idle++
		}
	}
	if idle != 2 {
		t.Fatalf("warm idle backends = %d; want both agents warm: %+v", idle, e.p.Backends())
	}
}

func TestConcurrentFirstStartsShareOneSpawn(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(agenttest.Script{InitDelayMs: 200})}, nil)
	s := e.session("fake")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- e.p.Warm(context.Background(), s.ID, "fake") }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Warm: %v", err)
		}
	}
	if n := e.p.Stats().Spawns; n != 1 {
		t.Fatalf("spawns = %d; want 1", n)
	}
	e.prompt(s.ID, "", "now")
	if n := e.p.Stats().Spawns; n != 1 {
		t.Fatalf("spawns after prompt = %d; want 1", n)
	}
}

func TestBusyRefusalAndCancel(t *testing.T) {
	slow := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "working"}, {WaitCancel: true}}}, {Echo: true}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(slow)}, nil)
	s := e.session("fake")
	ctx := context.Background()
	sub, err := e.p.Subscribe(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	tn, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "long"})
	if err != nil {
		t.Fatal(err)
	}
	nextOfType(t, sub, backends.EventMessageChunk) // the agent is working
	if _, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "again"}); !errors.Is(err, pool.ErrBusy) {
		t.Fatalf("second StartPrompt error = %v; want ErrBusy", err)
	}
	if err := e.p.Restore(ctx, s.ID, tn.ID, false); !errors.Is(err, pool.ErrBusy) {
		t.Errorf("Restore during a turn = %v; want ErrBusy", err)
	}
	if err := e.p.Cancel(ctx, s.ID); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	done, err := e.p.WaitTurn(ctx, s.ID, tn.ID)
	if err != nil || done.StopReason != "cancelled" {
		t.Fatalf("turn = %+v, %v; want cancelled", done, err)
	}
	if err := e.p.Cancel(ctx, s.ID); !errors.Is(err, pool.ErrNoTurn) {
		t.Errorf("Cancel without a turn = %v; want ErrNoTurn", err)
	}
	// Retry runs the last prompt again (the second scripted turn echoes).
	rt, err := e.p.Retry(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := e.p.WaitTurn(ctx, s.ID, rt.ID); r.Prompt != "long" || r.StopReason != "end_turn" {
		t.Errorf("retried turn = %+v", r)
	}
}

func TestLRUEvictionIdleReapAndCapacity(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	slow := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "x"}, {WaitCancel: true}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(echo), "slow": providerEntry(slow)}, func(c *pool.Config) {
		c.MaxWarm = 2
		c.Now = clock.Now
		c.IdleTimeout = time.Hour
	})
	// No warm-up: each agent starts at its session's prompt, in order.
	s1, s2, s3 := e.create("fake", false), e.create("fake", false), e.create("fake", false)
	e.prompt(s1.ID, "", "a")
	clock.Add(time.Minute)
	e.prompt(s2.ID, "", "b")
	clock.Add(time.Minute)
	e.prompt(s3.ID, "", "c") // evicts s1's backend, the least recently used
	waitUntil(t, "s1 evicted", func() bool {
		for _, b := range e.p.Backends() {
			if b.Session == s1.ID {
				return false
			}
		}
		return true
	})
	if n := e.p.Stats().Evictions; n != 1 {
		t.Errorf("evictions = %d; want 1", n)
	}
	if countType(e.events(s1.ID), "agent.evicted") != 1 {
		t.Errorf("no agent.evicted event for s1")
	}
	// Both warm backends busy: a third start waits in the queue, and gets
	// the slot of the first busy backend to become idle.
	ctx := context.Background()
	for _, s := range []pool.Session{s2, s3} {
		if _, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Agent: "slow", Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	queued, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s1.ID, Text: "x"})
	if err != nil || queued.QueuePosition != 1 {
		t.Fatalf("StartPrompt at capacity = %+v, %v; want it queued at position 1", queued, err)
	}
	if err := e.p.Cancel(ctx, s2.ID); err != nil {
		t.Fatal(err)
	}
	if tn, err := e.p.WaitTurn(ctx, s1.ID, queued.ID); err != nil || tn.StopReason != "end_turn" {
		t.Fatalf("queued turn = %+v, %v; want it run once s2's turn ended", tn, err)
	}
	if err := e.p.Cancel(ctx, s3.ID); err != nil {
		t.Fatal(err)
	}
	// Idle reaping with the injected clock.
	clock.Add(2 * time.Hour)
	e.p.ReapIdle()
	waitUntil(t, "idle backends reaped", func() bool { return len(e.p.Backends()) == 0 })
}

func TestMemoryBudget(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, func(c *pool.Config) {
		c.MemoryBudget = 100 << 20
		c.GroupRSS = func() map[int]int64 {
			// Every agent claims 120 MiB: over the 100 MiB budget on its own.
			m := map[int]int64{}
			for _, g := range backendsPIDs() {
				m[g] = 120 << 20
			}
			return m
		}
	})
	// No warm-up: s2's agent must start at its prompt, when s1's counts.
	s1, s2 := e.create("fake", false), e.create("fake", false)
	e.prompt(s1.ID, "", "a")
	registerPIDs(e.p)
	e.prompt(s2.ID, "", "b") // 120 MiB used: s1 is evicted to make room
	waitUntil(t, "s1 evicted for memory", func() bool {
		for _, b := range e.p.Backends() {
			if b.Session == s1.ID {
				return false
			}
		}
		return true
	})
}

var (
	pidMu sync.Mutex
	pids  []int
)

func registerPIDs(p *pool.Pool) {
	list := p.Backends() // calls GroupRSS, which takes pidMu
	pidMu.Lock()
	defer pidMu.Unlock()
	for _, b := range list {
		pids = append(pids, b.PID)
	}
}

func backendsPIDs() []int {
	pidMu.Lock()
	defer pidMu.Unlock()
	return append([]int(nil), pids...)
}

func TestCrashMidTurnThenResume(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "crashed")
	s := agenttest.Script{LoadSession: true, Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "about to crash"}, {CrashOnce: marker}, {Chunk: "survived"}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(s)}, nil)
	sess := e.session("fake")
	t1 := e.prompt(sess.ID, "", "go")
	if t1.StopReason != "error" || !strings.Contains(t1.Error, "crashing once") {
		t.Fatalf("turn 1 = %+v; want an error with the stderr tail", t1)
	}
	waitUntil(t, "crash recorded", func() bool { return e.p.Stats().Crashes == 1 })
	evs := e.events(sess.ID)
	if countType(evs, backends.EventAgentExited) != 1 {
		t.Errorf("agent.exited events: %v", typesOf(evs))
	}
	t2 := e.prompt(sess.ID, "", "again")
	if t2.StopReason != "end_turn" {
		t.Fatalf("turn 2 = %+v", t2)
	}
	evs = e.events(sess.ID)
	var ready []backends.Event
	for _, ev := range evs {
		if ev.Type == backends.EventAgentReady {
			ready = append(ready, ev)
		}
	}
	if len(ready) != 2 || !strings.Contains(string(ready[1].Data), `"resumed":true`) {
		t.Fatalf("agent.ready events = %v; want the restart to resume with session/load", ready)
	}
}

func TestCrashLoopGuard(t *testing.T) {
	code := 5
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Crash: &code}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(s)}, nil)
	sess := e.session("fake")
	for i := 0; i < 3; i++ {
		tn := e.prompt(sess.ID, "", "go")
		if tn.StopReason != "error" {
			t.Fatalf("turn %d = %+v", i, tn)
		}
		waitUntil(t, "crash recorded", func() bool { return e.p.Stats().Crashes == int64(i+1) })
	}
	_, err := e.p.StartPrompt(context.Background(), pool.PromptRequest{Session: sess.ID, Text: "once more"})
	if !errors.Is(err, pool.ErrAgentFailing) || !strings.Contains(err.Error(), "exit status 5") {
		t.Fatalf("fourth prompt error = %v; want ErrAgentFailing with the last error", err)
	}
	if n := e.p.Stats().Spawns; n != 3 {
		t.Errorf("spawns = %d; want 3 (no spawn storm)", n)
	}
	if !strings.Contains(err.Error(), "providers refresh fake") {
		t.Errorf("fourth prompt error = %v; want how to retry now", err)
	}

	// A probe that succeeds after the crashes clears them.
	e.probedOK.Store(time.Now().UnixNano())
	if tn := e.prompt(sess.ID, "", "after the probe"); tn.StopReason != "error" || strings.Contains(tn.Error, "keeps crashing") {
		t.Fatalf("prompt after a good probe = %+v; want the agent started again (and crashing in its turn)", tn)
	}
	if n := e.p.Stats().Spawns; n != 4 {
		t.Errorf("spawns after a good probe = %d; want 4", n)
	}
}

// forward connects registry changes to the pool, as the daemon does.
func forward(e *env) func() {
	_, ch, cancel := e.reg.Subscribe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range ch {
			e.p.ProviderChanged(append(c.Disabled, c.Removed...), c.SpecChanged)
		}
	}()
	return func() { cancel(); <-done }
}

func TestDisableProviderByEditingConfig(t *testing.T) {
	slow := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "x"}, {SleepMs: 700}, {Chunk: "finished"}}}}}
	providers := map[string]any{"fake": providerEntry(echo), "slow": providerEntry(slow)}
	e := newEnv(t, providers, nil)
	stop := forward(e)
	defer stop()
	s := e.session("fake")
	e.prompt(s.ID, "", "warm")
	pid := e.p.Backends()[0].PID
	ctx := context.Background()
	busy, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Agent: "slow", Text: "long"})
	if err != nil {
		t.Fatal(err)
	}
	// Disable both by editing the real file.
	fakeEntry := providerEntry(echo)
	fakeEntry["enabled"] = false
	slowEntry := providerEntry(slow)
	slowEntry["enabled"] = false
	writeProviders(t, e.provPath, map[string]any{"fake": fakeEntry, "slow": slowEntry})
	waitUntil(t, "idle backend of the disabled provider stopped", func() bool { return !backends.GroupAlive(pid) })
	done, err := e.p.WaitTurn(ctx, s.ID, busy.ID)
	if err != nil || done.StopReason != "end_turn" {
		t.Fatalf("busy turn = %+v, %v; want it to finish normally", done, err)
	}
	waitUntil(t, "busy backend stopped after its turn", func() bool { return len(e.p.Backends()) == 0 })
	_, err = e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Agent: "fake", Text: "x"})
	if !errors.Is(err, registry.ErrDisabled) || !strings.Contains(err.Error(), e.provPath) {
		t.Fatalf("prompt on a disabled provider error = %v; want ErrDisabled naming the config file", err)
	}
}

func TestShutdownLeavesNoProcessAndNewPoolResumes(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(agenttest.Script{LoadSession: true, Grandchild: true})}, nil)
	s := e.session("fake")
	e.prompt(s.ID, "", "one")
	var groups []int
	for _, b := range e.p.Backends() {
		groups = append(groups, b.PID)
	}
	if len(groups) != 1 || len(backends.GroupMembers(groups[0])) != 2 {
		t.Fatalf("want one agent with a grandchild, have %v", groups)
	}
	e.shutdown()
	for _, g := range groups {
		if backends.GroupAlive(g) {
			t.Fatalf("process group %d alive after Shutdown: %v", g, backends.GroupMembers(g))
		}
	}
	e.open()
	tn := e.prompt(s.ID, "", "two")
	if tn.StopReason != "end_turn" {
		t.Fatalf("turn after reopen = %+v", tn)
	}
	evs := e.events(s.ID)
	last := evs[len(evs)-1]
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("seq gap after reopen at %d: %d", i, ev.Seq)
		}
	}
	if last.Type != backends.EventTurnEnded {
		t.Errorf("last event %s", last.Type)
	}
	found := false
	for _, ev := range evs {
		if ev.Type == backends.EventAgentReady && strings.Contains(string(ev.Data), `"resumed":true`) {
			found = true
		}
	}
	if !found {
		t.Error("the new pool did not resume the agent's session")
	}
}

func TestCloseKeepsWork(t *testing.T) {
	writer := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Write: &agenttest.FileOp{Path: "new.txt", Content: "work {{prompt}}"}}}}}}
	e := newEnv(t, map[string]any{"w": providerEntry(writer)}, nil)
	s := e.session("w")
	tn := e.prompt(s.ID, "", "done")
	d, err := e.p.Diff(context.Background(), s.ID, tn.ID)
	if err != nil || len(d.Files) != 1 || d.Files[0].Path != "new.txt" {
		t.Fatalf("Diff = %+v, %v", d, err)
	}
	res, err := e.p.Close(context.Background(), s.ID, false)
	if err != nil || !res.Worktree.Committed {
		t.Fatalf("Close = %+v, %v; want the work committed", res, err)
	}
	if out := git(t, e.repo, "show", res.Worktree.Branch+":new.txt"); out != "work done" {
		t.Fatalf("branch has new.txt = %q", out)
	}
	if _, err := e.p.StartPrompt(context.Background(), pool.PromptRequest{Session: s.ID, Text: "x"}); !errors.Is(err, pool.ErrClosed) {
		t.Errorf("prompt after close = %v; want ErrClosed", err)
	}
}

func TestRestoreUndoesATurn(t *testing.T) {
	writer := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Write: &agenttest.FileOp{Path: "README.md", Content: "changed"}}}}}}
	e := newEnv(t, map[string]any{"w": providerEntry(writer)}, nil)
	s := e.session("w")
	tn := e.prompt(s.ID, "", "go")
	if err := e.p.Restore(context.Background(), s.ID, tn.ID, false); err != nil {
		t.Fatal(err)
	}
	got, _ := e.p.Get(context.Background(), s.ID)
	if b := readFile(t, filepath.Join(got.Worktree.Path, "README.md")); b != "# test repo\n" {
		t.Fatalf("README after restore = %q", b)
	}
}

func TestPermissionAskedAndAnswered(t *testing.T) {
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Permission: &agenttest.Permission{
		ToolCall: agenttest.ToolCall{ID: "t1", Title: "Write file", Kind: "edit"},
		Allowed:  []agenttest.Step{{Write: &agenttest.FileOp{Path: "ok.txt", Content: "yes"}}},
	}}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(s)}, nil)
	sess := e.session("fake")
	sub, err := e.p.Subscribe(context.Background(), sess.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	tn, err := e.p.StartPrompt(context.Background(), pool.PromptRequest{Session: sess.ID, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	nextOfType(t, sub, backends.EventPermissionRequest)
	p := e.p.Pending(sess.ID)
	if len(p) != 1 {
		t.Fatalf("Pending = %v", p)
	}
	reqID := p[0].ID
	if err := e.p.Answer(sess.ID, reqID, "allow_once"); err != nil {
		t.Fatal(err)
	}
	done, _ := e.p.WaitTurn(context.Background(), sess.ID, tn.ID)
	if done.StopReason != "end_turn" {
		t.Fatalf("turn = %+v", done)
	}
	if b := readFile(t, filepath.Join(sess.Worktree.Path, "ok.txt")); b != "yes" {
		t.Fatalf("ok.txt = %q", b)
	}
	evs := e.events(sess.ID)
	if countType(evs, backends.EventPermissionResolved) != 1 || countType(evs, backends.EventFSWrite) != 1 {
		t.Errorf("events: %v", typesOf(evs))
	}
}
