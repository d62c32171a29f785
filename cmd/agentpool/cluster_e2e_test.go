package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// clusterScripts are the agents of the cluster tests: "work" writes each
// prompt to work.txt and says so; "slow" does the same, but its second
// turn streams for about ten seconds (a turn a kill cuts).
func clusterScripts() map[string]any {
	write := agenttest.Turn{Steps: []agenttest.Step{
		{Write: &agenttest.FileOp{Path: "work.txt", Content: "{{prompt}}\n"}},
		{Chunk: "wrote {{prompt}}"},
	}}
	slow := agenttest.Turn{Steps: []agenttest.Step{{Chunks: 200, ChunksPerSecond: 20}, {Chunk: "slow done"}}}
	return map[string]any{
		"work": agenttest.Script{AgentName: "cluster-demo", Turns: []agenttest.Turn{write}},
		"slow": agenttest.Script{AgentName: "cluster-demo", Turns: []agenttest.Turn{write, slow, write}},
	}
}

// clusterHost is one daemon of a test cluster.
type clusterHost struct {
	*daemon
	id string
}

// startClusterHost starts daemon id on its own home, on the shared store
// url, with the cluster key, short leases, and args.
func startClusterHost(t *testing.T, bin, id, url, key string, args ...string) *clusterHost {
	t.Helper()
	home := t.TempDir()
	writeScripted(t, home, bin, clusterScripts())
	d := startDaemonArgs(t, bin, home, append([]string{"--lease-ttl", clusterTTL.String()}, args...),
		"AGENTPOOL_STORE="+url, "AGENTPOOL_HOST_ID="+id, clusterKeyEnv+"="+key)
	return &clusterHost{daemon: d, id: id}
}

// clusterTTL is the test cluster's lease TTL.
const clusterTTL = 3 * time.Second

// sharedRemote makes a bare repository with one commit on main, the
// remote every host of the test cluster mirrors, and returns its URL.
func sharedRemote(t *testing.T) string {
	t.Helper()
	src := e2eRepoAt(t, filepath.Join(t.TempDir(), "src"), map[string]string{"README.md": "# shared\n"})
	bare := filepath.Join(t.TempDir(), "shared.git")
	e2eGit(t, src, "init", "-q", "--bare", "-b", "main", bare)
	e2eGit(t, src, "push", "-q", bare, "main")
	return "file://" + bare
}

// clusterKeyFile writes a cluster key (0600) and returns its path.
func clusterKeyFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(p, []byte("test-cluster-key-0123456789abcdef0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitHosts waits until h lists n alive hosts.
func (h *clusterHost) waitHosts(n int) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		list, err := h.client.Hosts(context.Background())
		alive := 0
		for _, x := range list {
			if x.Alive {
				alive++
			}
		}
		if err == nil && alive == n {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("host %s lists %d alive hosts (%v); want %d", h.id, alive, err, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// promptRetry prompts session through c, retrying while the session is
// moving between hosts (503) for up to limit, and waits for the turn.
func promptRetry(t *testing.T, c *httpapi.Client, session, text string, limit time.Duration) pool.Turn {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		// Bounded: a prompt stuck on its way fails the test, with the
		// daemons' logs, rather than hang it.
		ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(time.Minute))
		turn, err := c.Prompt(ctx, session, "", text, true)
		cancel()
		if err == nil {
			return turn
		}
		var ae *httpapi.Error
		if !errors.As(err, &ae) || time.Now().After(deadline) || (ae.Status != 503 && ae.Status != 409) {
			t.Fatalf("prompt %s %q: %v", session, text, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// eventsOf reads the whole stored stream of session through c.
func eventsOf(t *testing.T, c *httpapi.Client, session string) []backends.Event {
	t.Helper()
	evs, err := c.EventLog(context.Background(), session, 0)
	if err != nil {
		t.Fatalf("events of %s: %v", session, err)
	}
	return evs
}

// checkSeqs says whether evs have the seqs 1..n, each once.
func checkSeqs(t *testing.T, what string, evs []backends.Event) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Errorf("%s: event %d has seq %d; want %d (no gap, no duplicate)", what, i, ev.Seq, i+1)
			return
		}
	}
}

// TestEndToEndCluster runs three built daemons on one PostgreSQL store
// and one shared bare repository: sessions are placed over the hosts;
// prompts and event streams work through any host, each reader getting
// every event once; a session moves between hosts with its work; a host
// killed with SIGKILL while a turn runs has its sessions taken over by the
// others (the cut turn ended "interrupted" once, session.moved saying
// what was lost, the work pushed before kept); and a draining host hands
// its sessions over on stop. It reports how long failover took.
func TestEndToEndCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three daemons")
	}
	url := startPostgres(t)
	bin := agentpoolBinary(t)
	key := clusterKeyFile(t)
	remote := sharedRemote(t)
	a := startClusterHost(t, bin, "host-a", url, key)
	b := startClusterHost(t, bin, "host-b", url, key, "--drain")
	c := startClusterHost(t, bin, "host-c", url, key)
	byID := map[string]*clusterHost{"host-a": a, "host-b": b, "host-c": c}
	all := []*clusterHost{a, b, c}
	for _, h := range all {
		h.waitHosts(3)
	}
	// Placement needs every host's providers, which each heartbeat
	// carries once probed.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		snap, err := a.client.Providers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		w, _ := snap.Provider("work")
		sl, _ := snap.Provider("slow")
		if len(w.Hosts) == 3 && len(sl.Hosts) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("providers work on %v, slow on %v; want both on the three hosts", w.Hosts, sl.Hosts)
		}
	}
	ctx := context.Background()

	// Placement: six sessions created through a spread over the hosts;
	// one asked for on host-c lands there.
	owner := map[string]string{}
	for i := range 6 {
		s, err := a.client.CreateSession(ctx, pool.CreateRequest{Repo: remote, Agent: "work", Title: fmt.Sprint("s", i)})
		if err != nil {
			t.Fatalf("create %d through host-a: %v", i, err)
		}
		owner[s.ID] = s.Host
	}
	var onC string
	{
		var created httpapi.CreatedSession
		err := a.client.Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": remote, "agent": "work", "host": "host-c"}, &created)
		if err != nil || created.Host != "host-c" {
			t.Fatalf("create on host-c through host-a = %+v, %v; want it on host-c", created.Session, err)
		}
		onC = created.ID
		owner[onC] = "host-c"
	}
	if list, err := a.client.Hosts(ctx); err == nil {
		for _, h := range list {
			t.Logf("host %s: alive %v capacity %d warm %d sessions %d providers %v", h.ID, h.Alive, h.Capacity, h.Warm, h.Sessions, h.Providers)
		}
	}
	perHost := map[string]int{}
	for _, h := range owner {
		perHost[h]++
	}
	t.Logf("sessions per host: %v", perHost)
	if len(perHost) < 2 {
		t.Errorf("sessions per host %v; want them spread over the hosts", perHost)
	}

	// Every session prompted through a host that does not own it; its
	// events read through a third: every event once, in order.
	for id, own := range owner {
		var via, reader *clusterHost
		for _, h := range all {
			if h.id != own && via == nil {
				via = h
			} else if h.id != own && reader == nil {
				reader = h
			}
		}
		turn := promptRetry(t, via.client, id, "hello "+id, 30*time.Second)
		if turn.StopReason != "end_turn" {
			t.Errorf("turn of %s through %s = %+v; want end_turn", id, via.id, turn)
		}
		evs := eventsOf(t, reader.client, id)
		checkSeqs(t, id+" read through "+reader.id, evs)
		if direct := eventsOf(t, byID[own].client, id); len(direct) != len(evs) {
			t.Errorf("%s: %d events through %s, %d from its owner %s", id, len(evs), reader.id, len(direct), own)
		}
	}

	// A live SSE reader through a non-owner sees a whole turn, once.
	{
		id := onC
		got := make(chan []backends.Event, 1)
		sctx, cancel := context.WithCancel(ctx)
		last := eventsOf(t, c.client, id)
		from := last[len(last)-1].Seq
		go func() {
			var seen []backends.Event
			_ = a.client.Events(sctx, id, from, func(ev backends.Event) error {
				seen = append(seen, ev)
				if ev.Type == backends.EventTurnEnded {
					return httpapi.ErrStop
				}
				return nil
			})
			got <- seen
		}()
		time.Sleep(200 * time.Millisecond)
		promptRetry(t, b.client, id, "streamed", 30*time.Second)
		var seen []backends.Event
		select {
		case seen = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("SSE through host-a saw no turn.ended")
		}
		cancel()
		for i, ev := range seen {
			if ev.Seq != from+int64(i)+1 {
				t.Fatalf("SSE through host-a: event %d seq %d; want %d", i, ev.Seq, from+int64(i)+1)
			}
		}
	}

	// A move: the session on host-c goes to host-a with its work, and
	// continues there.
	if out, err := b.cli("session", "move", onC, "host-a"); err != nil {
		t.Fatalf("session move %s host-a (through host-b): %v\n%s", onC, err, out)
	}
	s, err := c.client.Session(ctx, onC)
	if err != nil || s.Host != "host-a" || !strings.HasPrefix(s.Worktree.Path, a.home) {
		t.Errorf("moved session = host %q worktree %q, %v; want host-a, a worktree in host-a's home", s.Host, s.Worktree.Path, err)
	}
	if b, err := os.ReadFile(filepath.Join(s.Worktree.Path, "work.txt")); err != nil || string(b) != "streamed\n" {
		t.Errorf("work.txt after the move = %q, %v; want the work done on host-c", b, err)
	}
	promptRetry(t, c.client, onC, "after the move", 30*time.Second)
	owner[onC] = "host-a"

	// kill -9 of host-c with a turn running on one of its sessions.
	var created httpapi.CreatedSession
	if err := a.client.Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": remote, "agent": "slow", "host": "host-c"}, &created); err != nil {
		t.Fatal(err)
	}
	victim := created.ID
	promptRetry(t, a.client, victim, "before the kill", 30*time.Second)
	beforeKill := eventsOf(t, a.client, victim)
	if _, err := a.client.Prompt(ctx, victim, "", "slow turn", false); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		evs := eventsOf(t, a.client, victim)
		if len(evs) > len(beforeKill)+5 || time.Now().After(deadline) {
			beforeKill = evs
			break
		}
	}
	killed := time.Now()
	c.kill9()
	turn := promptRetry(t, a.client, victim, "after the failover", clusterTTL+30*time.Second)
	failover := time.Since(killed)
	t.Logf("failover: kill -9 of host-c to the first turn ended on its moved session: %v (lease TTL %v)", failover.Round(time.Millisecond), clusterTTL)
	if turn.StopReason != "end_turn" {
		t.Errorf("first turn after the failover = %+v", turn)
	}
	after := eventsOf(t, b.client, victim)
	checkSeqs(t, "the moved session", after)
	for i, ev := range beforeKill {
		if i >= len(after) || after[i].Seq != ev.Seq || after[i].Type != ev.Type || string(after[i].Data) != string(ev.Data) {
			t.Fatalf("event %d seen before the kill (%d %s) is not stored as it was", i, ev.Seq, ev.Type)
		}
	}
	var moved, interrupted int
	for _, ev := range after {
		switch {
		case ev.Type == "session.moved":
			moved++
			var m map[string]any
			_ = json.Unmarshal(ev.Data, &m)
			if m["from"] != "host-c" || m["reason"] != "failover" || m["lost"] == "" {
				t.Errorf("session.moved = %s; want from host-c, failover, what was lost", ev.Data)
			}
			t.Logf("session.moved: %s", ev.Data)
		case ev.Type == backends.EventTurnEnded && strings.Contains(string(ev.Data), `"interrupted"`):
			interrupted++
		}
	}
	if moved != 1 || interrupted != 1 {
		t.Errorf("moved session: %d session.moved, %d turns ended interrupted; want 1 and 1", moved, interrupted)
	}
	s, err = a.client.Session(ctx, victim)
	if err == nil {
		if got, err := os.ReadFile(filepath.Join(s.Worktree.Path, "work.txt")); err != nil || !strings.Contains(string(got), "after the failover") {
			t.Errorf("work.txt on the new host = %q, %v", got, err)
		}
	}

	// The drain: host-b stops, handing its sessions to host-a; one of
	// them is closed first, through host-a.
	var onB []string
	for id, own := range owner {
		if own == "host-b" {
			onB = append(onB, id)
		}
	}
	sort.Strings(onB)
	if len(onB) > 1 {
		gone := onB[0]
		before, err := b.client.Session(ctx, gone)
		if err != nil {
			t.Fatal(err)
		}
		res, err := a.client.CloseSession(ctx, gone, false)
		if err != nil || res.Session != gone {
			t.Fatalf("close %s (host-b's) through host-a: %+v, %v", gone, res, err)
		}
		if _, err := os.Stat(before.Worktree.Path); !os.IsNotExist(err) {
			t.Errorf("worktree %s of the closed session on host-b: %v; want it removed", before.Worktree.Path, err)
		}
		if s, err := b.client.Session(ctx, gone); err != nil || s.Status != "closed" {
			t.Errorf("closed session seen from host-b: %q, %v; want closed", s.Status, err)
		}
		onB = onB[1:]
	}
	a.waitHosts(2) // host-c is seen gone: the drain hands nothing to it
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Wait()
	for _, id := range onB {
		s, err := a.client.Session(ctx, id)
		if err != nil || s.Host != "host-a" {
			t.Errorf("session %s after host-b drained: host %q, %v; want host-a", id, s.Host, err)
			continue
		}
		promptRetry(t, a.client, id, "after the drain", 10*time.Second)
		for _, ev := range eventsOf(t, a.client, id) {
			if ev.Type == "session.moved" && !strings.Contains(string(ev.Data), `"drain"`) {
				t.Errorf("session.moved of a drained session: %s", ev.Data)
			}
		}
	}
}

// TestEndToEndClusterFrozenHost freezes a host (SIGSTOP) with a turn
// running, past its leases' TTL: another host takes its session over and
// runs the next turn. Thawed, the frozen host finds its lease lost,
// stops the session's agent, and writes nothing more for it: every
// event is stored once, the cut turn ended once.
func TestEndToEndClusterFrozenHost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs two daemons")
	}
	url := startPostgres(t)
	bin := agentpoolBinary(t)
	key := clusterKeyFile(t)
	remote := sharedRemote(t)
	a := startClusterHost(t, bin, "host-a", url, key)
	b := startClusterHost(t, bin, "host-b", url, key)
	a.waitHosts(2)
	ctx := context.Background()
	var created httpapi.CreatedSession
	if err := a.client.Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": remote, "agent": "slow", "host": "host-b"}, &created); err != nil {
		t.Fatal(err)
	}
	id := created.ID
	promptRetry(t, a.client, id, "first", 30*time.Second)
	if _, err := a.client.Prompt(ctx, id, "", "slow turn", false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the slow turn streams
	agentPIDs := agentPIDsOf(t, b.client, id)
	if len(agentPIDs) == 0 {
		t.Fatal("no agent of the session runs on host-b")
	}
	thaw := freezeHost(t, b)
	defer thaw()
	turn := promptRetry(t, a.client, id, "on host-a", clusterTTL+30*time.Second)
	if turn.StopReason != "end_turn" {
		t.Fatalf("turn on host-a = %+v", turn)
	}
	thaw()
	// Thawed, host-b releases the session: its agent stops.
	waitAgentsGone(t, agentPIDs, clusterTTL+10*time.Second, "host-b's agent of the session after it lost the lease")
	time.Sleep(time.Second) // anything host-b would still write
	evs := eventsOf(t, a.client, id)
	checkSeqs(t, "the session taken over", evs)
	ends := map[int64]int{}
	moved := 0
	for _, ev := range evs {
		switch ev.Type {
		case backends.EventTurnEnded:
			ends[ev.Turn]++
		case backends.EventSessionMoved:
			moved++
		}
	}
	for turn, n := range ends {
		if n != 1 {
			t.Errorf("turn %d has %d turn.ended; want 1", turn, n)
		}
	}
	if moved != 1 || len(ends) != 3 {
		t.Errorf("%d session.moved, turns ended %v; want 1 and three turns (first, the cut one, the one on host-a)", moved, ends)
	}
	if s, err := b.client.Session(ctx, id); err != nil || s.Host != "host-a" {
		t.Errorf("the session seen from host-b: host %q, %v; want host-a", s.Host, err)
	}
	// host-b answers for it by forwarding to host-a.
	promptRetry(t, b.client, id, "through host-b", 30*time.Second)
}

// agentPIDsOf returns the processes of session's agents as the owner's
// pool lists them.
func agentPIDsOf(t *testing.T, c *httpapi.Client, session string) []agenttest.PidEntry {
	t.Helper()
	st, err := c.Pool(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []agenttest.PidEntry
	for _, be := range st.Backends {
		if be.Session != session || be.PID <= 0 {
			continue
		}
		if ps, err := agenttest.ReadProcStat(be.PID); err == nil {
			out = append(out, agenttest.PidEntry{Pid: be.PID, StartTime: ps.StartTime})
		}
	}
	return out
}

// freezeHost stops h (SIGSTOP) and returns what thaws it (SIGCONT), once.
func freezeHost(t *testing.T, h *clusterHost) (thaw func()) {
	t.Helper()
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	return func() { once.Do(func() { _ = h.cmd.Process.Signal(syscall.SIGCONT) }) }
}

// waitAgentsGone waits until none of pids runs, failing after within.
func waitAgentsGone(t *testing.T, pids []agenttest.PidEntry, within time.Duration, what string) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		alive := 0
		for _, pid := range pids {
			if agenttest.Alive(pid) {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %s still run after %v", alive, what, within)
		}
	}
}
