package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/hosts"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/internal/pgtest"
	"github.com/agentpool/agentpool/internal/testcert"
	"github.com/agentpool/agentpool/worktree"
)

// The second pass of several hosts: every effect of a host is fenced, not
// only its rows (pushes too, by the shared repository itself); a moved or
// drained session stays where it went; a dead host's sessions are taken
// over in one wave; TLS hosts serve their clients by their names; a host
// with another cluster key does not join.

// staleScript is the agent of the fencing test: its first turn writes the
// prompt to work.txt; its second streams for about five seconds and only
// then writes the prompt (a turn in flight when its host freezes, whose
// work the host would push after it thaws).
func staleScript() agenttest.Script {
	write := agenttest.Turn{Steps: []agenttest.Step{
		{Write: &agenttest.FileOp{Path: "work.txt", Content: "{{prompt}}\n"}},
		{Chunk: "wrote {{prompt}}"},
	}}
	late := agenttest.Turn{Steps: []agenttest.Step{
		{Chunks: 100, ChunksPerSecond: 20},
		{Write: &agenttest.FileOp{Path: "work.txt", Content: "{{prompt}}\n"}},
		{Chunk: "late {{prompt}}"},
	}}
	return agenttest.Script{AgentName: "cluster-demo", Turns: []agenttest.Turn{write, late, write}}
}

// startFenceHost starts cluster host id on home (reused across restarts)
// with the cluster scripts and the stale one.
func startFenceHost(t *testing.T, bin, id, home, url, key string, args ...string) *clusterHost {
	t.Helper()
	scripts := clusterScripts()
	scripts["stale"] = staleScript()
	writeScripted(t, home, bin, scripts)
	d := startDaemonArgs(t, bin, home, append([]string{"--lease-ttl", clusterTTL.String()}, args...),
		"AGENTPOOL_STORE="+url, "AGENTPOOL_HOST_ID="+id, clusterKeyEnv+"="+key)
	return &clusterHost{daemon: d, id: id}
}

// waitAgents waits until every host of hs lists every agent of ids on
// every host (placement needs them).
func waitAgents(t *testing.T, hs []*clusterHost, ids ...string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		snap, err := hs[0].client.Providers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		for _, id := range ids {
			p, _ := snap.Provider(id)
			ok = ok && len(p.Hosts) == len(hs)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agents %v are not on the %d hosts", ids, len(hs))
		}
	}
}

// sharedBare makes the shared bare repository (one commit on main), with
// its refs' updates logged (core.logAllRefUpdates): the push log. It
// returns its path.
func sharedBare(t *testing.T) string {
	t.Helper()
	src := e2eRepoAt(t, filepath.Join(t.TempDir(), "src"), map[string]string{"README.md": "# shared\n"})
	bare := filepath.Join(t.TempDir(), "shared.git")
	e2eGit(t, src, "init", "-q", "--bare", "-b", "main", bare)
	e2eGit(t, bare, "config", "core.logAllRefUpdates", "always")
	e2eGit(t, bare, "config", "receive.denyNonFastForwards", "true")
	e2eGit(t, src, "push", "-q", bare, "main")
	return bare
}

// fenceLink is one commit of a session's fence on the remote: a push (or
// a claim) that landed, by host at epoch.
type fenceLink struct {
	host  string
	epoch int64
}

// fenceHistory reads the fence of session on the bare remote, oldest
// first.
func fenceHistory(t *testing.T, bare, session string) []fenceLink {
	t.Helper()
	out := e2eGit(t, bare, "log", "--reverse", "--format=%x00%b", worktree.FenceRefPrefix+session)
	var links []fenceLink
	for _, msg := range strings.Split(out, "\x00") {
		var l fenceLink
		for _, line := range strings.Split(msg, "\n") {
			if v, ok := strings.CutPrefix(line, "Host: "); ok {
				l.host = v
			}
			if v, ok := strings.CutPrefix(line, "Epoch: "); ok {
				l.epoch, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if l.host != "" {
			links = append(links, l)
		}
	}
	return links
}

// stalePushes counts the links of a fence that landed after a link of a
// later epoch: pushes of a host that had lost the session.
func stalePushes(links []fenceLink) int {
	n, top := 0, int64(0)
	for _, l := range links {
		if l.epoch < top {
			n++
		}
		top = max(top, l.epoch)
	}
	return n
}

// fenceCluster is three hosts on one PostgreSQL sharing a bare repository
// by URL, each with agents, all up and seeing each other.
type fenceCluster struct {
	a, b, c *clusterHost
	all     []*clusterHost
	bare    string // the shared repository's path
	remote  string // its URL
}

// startFenceCluster starts host-a, host-b and host-c (host-c with its
// extra serve arguments) and waits until each lists the three and has
// agent ready.
func startFenceCluster(t *testing.T, agent string, cArgs ...string) fenceCluster {
	t.Helper()
	url := startPostgres(t)
	bin := agentpoolBinary(t)
	key := clusterKeyFile(t)
	f := fenceCluster{bare: sharedBare(t)}
	f.remote = "file://" + f.bare
	f.a = startFenceHost(t, bin, "host-a", t.TempDir(), url, key)
	f.b = startFenceHost(t, bin, "host-b", t.TempDir(), url, key)
	f.c = startFenceHost(t, bin, "host-c", t.TempDir(), url, key, cArgs...)
	f.all = []*clusterHost{f.a, f.b, f.c}
	for _, h := range f.all {
		h.waitHosts(3)
	}
	waitAgents(t, f.all, agent)
	return f
}

// TestEndToEndClusterFencedPushes freezes (SIGSTOP) a host while turns of
// its sessions are in flight, past the leases' TTL: the other hosts take
// the sessions over, fence them on the shared repository and run a turn
// on each, which they push. Thawed, the frozen host's turns end and it
// would push their work: nothing of it lands (the remote's fence and the
// push log name no push of the frozen host after the new owners'), the
// remote holds the new owners' work, session.moved names the turn whose
// work never reached the shared repository, and a close through a host
// that does not own the session says where the work is once it is there.
func TestEndToEndClusterFencedPushes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three daemons")
	}
	f := startFenceCluster(t, "stale")
	a, b, c, bare, remote := f.a, f.b, f.c, f.bare, f.remote
	ctx := context.Background()
	const n = 4
	var ids []string
	for i := range n {
		var created httpapi.CreatedSession
		if err := a.client.Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": remote, "agent": "stale", "host": "host-b", "title": fmt.Sprint("f", i)}, &created); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, created.ID)
		promptRetry(t, a.client, created.ID, "first", 30*time.Second)
	}
	for _, id := range ids {
		if _, err := a.client.Prompt(ctx, id, "", "stale work", false); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // the late turns stream
	var pids []agenttest.PidEntry
	for _, id := range ids {
		pids = append(pids, agentPIDsOf(t, b.client, id)...)
	}
	thaw := freezeHost(t, b)
	defer thaw()
	for _, id := range ids {
		if turn := promptRetry(t, c.client, id, "new owner", clusterTTL+30*time.Second); turn.StopReason != "end_turn" {
			t.Fatalf("turn of %s on its new owner = %+v", id, turn)
		}
	}
	thaw()
	// Thawed, host-b loses the sessions: their agents stop; what its
	// turns did is never pushed.
	waitAgentsGone(t, pids, clusterTTL+20*time.Second, "host-b's agents after it lost their sessions")
	time.Sleep(2 * time.Second) // what host-b would still push
	stale, links := 0, 0
	for _, id := range ids {
		hist := fenceHistory(t, bare, id)
		links += len(hist)
		stale += stalePushes(hist)
		if got := strings.TrimSpace(e2eGit(t, bare, "show", worktree.CheckpointRefPrefix+id+":work.txt")); got != "new owner" {
			t.Errorf("%s: the remote's checkpoint has work.txt %q; want the new owner's %q", id, got, "new owner")
		}
		// The push log: no update of the checkpoint ref by host-b's
		// work after the new owner's.
		var moved map[string]any
		for _, ev := range eventsOf(t, a.client, id) {
			if ev.Type == backends.EventSessionMoved {
				_ = json.Unmarshal(ev.Data, &moved)
			}
		}
		if moved == nil || moved["from"] != "host-b" || !strings.Contains(fmt.Sprint(moved["lost"]), "turn 2") {
			t.Errorf("%s: session.moved = %v; want from host-b, naming turn 2 as never pushed", id, moved)
		}
	}
	// host-b stopped short of pushing (the store refused it the lease).
	// Should a stale host push all the same, expecting on the remote the
	// new owner's values (what an unfenced ledger read gave it), the
	// remote refuses it: the fence it expects is gone. Without the fence
	// the same push would land (shown on a copy of the remote).
	refused := staleRawPush(t, b.home, bare, ids[1])
	t.Logf("fenced pushes: %d sessions, %d pushes and claims landed, stale pushes landed: %d (goal 0); a raw push from host-b's mirror expecting its fence: refused %v",
		n, links, stale, refused)
	if !refused {
		t.Error("a push from host-b's mirror expecting host-b's fence landed")
	}
	if stale != 0 {
		t.Errorf("%d stale pushes of host-b landed after the new owners'", stale)
	}
	// Closed through host-a (the owner is host-a or host-c): the close
	// says where the work is, and it is there.
	id := ids[0]
	out, err := a.cli("session", "close", id)
	if err != nil || !strings.Contains(out, "pushed to "+remote) {
		t.Fatalf("session close %s through host-a = %v\n%s; want it pushed to %s", id, err, out, remote)
	}
	s, err := a.client.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(e2eGit(t, bare, "show", s.Worktree.Branch+":work.txt")); got != "new owner" {
		t.Errorf("the remote's branch %s has work.txt %q after the close; want %q", s.Worktree.Branch, got, "new owner")
	}
}

// staleRawPush pushes, with git alone, from the mirror in home (a host
// that lost session) the session's checkpoint it holds, expecting on the
// remote bare the branch and checkpoint the remote holds now and the
// fence it last wrote: as its daemon would, past any check of its lease.
// It reports whether the remote refused it (and held its refs), after
// checking that the same push without the fence lands on a copy of the
// remote.
func staleRawPush(t *testing.T, home, bare, session string) bool {
	t.Helper()
	mirrors, _ := filepath.Glob(filepath.Join(home, "mirrors", "*"))
	if len(mirrors) != 1 {
		t.Fatalf("mirrors of host-b: %v; want one", mirrors)
	}
	mirror := mirrors[0]
	fence := worktree.FenceRefPrefix + session
	ckpt := worktree.CheckpointRefPrefix + session
	mine := e2eGit(t, mirror, "rev-parse", fence)
	tree := strings.TrimSpace(e2eGit(t, mirror, "rev-parse", "HEAD^{tree}"))
	next := strings.TrimSpace(e2eGit(t, mirror, "commit-tree", tree, "-p", strings.TrimSpace(mine), "-m", "stale"))
	local := strings.TrimSpace(e2eGit(t, mirror, "rev-parse", ckpt))
	remoteCkpt := strings.TrimSpace(e2eGit(t, bare, "rev-parse", ckpt))
	if local == remoteCkpt {
		t.Fatalf("host-b's checkpoint of %s is the remote's: nothing stale to push", session)
	}
	push := func(to string, withFence bool) error {
		args := []string{"-C", mirror, "push", "--atomic", "--porcelain", "--force-with-lease=" + ckpt + ":" + remoteCkpt}
		specs := []string{local + ":" + ckpt}
		if withFence {
			args = append(args, "--force-with-lease="+fence+":"+strings.TrimSpace(mine))
			specs = append(specs, next+":"+fence)
		}
		return exec.Command("git", append(append(args, to), specs...)...).Run()
	}
	cp := filepath.Join(t.TempDir(), "copy.git")
	e2eGit(t, t.TempDir(), "clone", "-q", "--mirror", bare, cp)
	if err := push("file://"+cp, false); err != nil {
		t.Fatalf("the stale push without a fence did not land on a copy of the remote: %v", err)
	}
	err := push("file://"+bare, true)
	return err != nil && strings.TrimSpace(e2eGit(t, bare, "rev-parse", ckpt)) == remoteCkpt
}

// sessionHosts lists the host of every session through c.
func sessionHosts(t *testing.T, c *httpapi.Client) map[string]string {
	t.Helper()
	list, err := c.Sessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list {
		out[s.ID] = s.Host
	}
	return out
}

// movedEvents returns the data of the session.moved events of session.
func movedEvents(t *testing.T, c *httpapi.Client, session string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range eventsOf(t, c, session) {
		if ev.Type == backends.EventSessionMoved {
			var m map[string]any
			_ = json.Unmarshal(ev.Data, &m)
			out = append(out, m)
		}
	}
	return out
}

// TestEndToEndClusterMovesStay: sessions moved (through a host that is
// neither their owner nor their target) or drained, then left alone for
// two leases' length, stay on the host they went to (which holds and
// renews their leases): one session.moved each, saying moved or drained,
// nothing lost. A session moved back to the host that removed its
// worktree at the hand-over continues there from the remote.
func TestEndToEndClusterMovesStay(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three daemons")
	}
	f := startFenceCluster(t, "work", "--drain")
	a, b, c, remote := f.a, f.b, f.c, f.remote
	ctx := context.Background()
	create := func(on string) string {
		var created httpapi.CreatedSession
		if err := b.client.Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": remote, "agent": "work", "host": on}, &created); err != nil {
			t.Fatal(err)
		}
		promptRetry(t, b.client, created.ID, "work of "+created.ID, 30*time.Second)
		return created.ID
	}
	moved := []string{create("host-a"), create("host-a")}
	drained := []string{create("host-c"), create("host-c")}
	// The CLI places a session on a host, and shows where each runs.
	out, err := b.cli("session", "new", "--repo", remote, "--agent", "work", "--host", "host-c", "--no-warm", "--json")
	var made struct {
		ID   string `json:"id"`
		Host string `json:"host"`
	}
	if err != nil || json.Unmarshal([]byte(out[max(strings.Index(out, "{"), 0):]), &made) != nil || made.Host != "host-c" {
		t.Fatalf("session new --host host-c = %v\n%s", err, out)
	}
	drained = append(drained, made.ID)
	if out, err := b.cli("session", "list"); err != nil || !strings.Contains(out, "HOST") || !strings.Contains(out, made.ID+"  open    host-c") {
		t.Errorf("session list = %v\n%s; want the HOST column, %s on host-c", err, out, made.ID)
	}
	if out, err := a.cli("session", "show", made.ID); err != nil || !strings.Contains(out, "host      host-c") {
		t.Errorf("session show %s = %v\n%s; want its host", made.ID, err, out)
	}
	for _, id := range moved {
		out, err := c.cli("session", "move", id, "host-b")
		if err != nil || !strings.Contains(out, "moved from host-a to host-b") {
			t.Fatalf("session move %s host-b through host-c = %v\n%s", id, err, out)
		}
	}
	// A move sent again to the host it reached answers that it is there.
	if res, err := a.client.MoveSession(ctx, moved[0], "host-b"); err != nil || !res.Already || res.To != "host-b" {
		t.Errorf("move %s to host-b again = %+v, %v; want already there", moved[0], res, err)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	_ = c.cmd.Wait()
	want := map[string]string{moved[0]: "host-b", moved[1]: "host-b"}
	hostsNow := sessionHosts(t, a.client)
	for _, id := range drained {
		if h := hostsNow[id]; h != "host-a" && h != "host-b" {
			t.Fatalf("drained session %s is on %q; want host-a or host-b", id, h)
		}
		want[id] = hostsNow[id]
	}
	time.Sleep(2*clusterTTL + time.Second) // nobody touches them
	hostsNow = sessionHosts(t, b.client)
	for id, h := range want {
		if hostsNow[id] != h {
			t.Errorf("session %s is on %q after two leases of silence; want %s", id, hostsNow[id], h)
		}
		ms := movedEvents(t, a.client, id)
		if len(ms) != 1 || ms[0]["lost"] != "" || (ms[0]["reason"] != "move" && ms[0]["reason"] != "drain") {
			t.Errorf("session %s: session.moved %v; want one, moved or drained, nothing lost", id, ms)
		}
		promptRetry(t, a.client, id, "after the silence", 30*time.Second)
	}
	// Back to host-a, which removed its worktree when it handed it over.
	id := moved[0]
	if out, err := b.cli("session", "move", id, "host-a"); err != nil {
		t.Fatalf("session move %s host-a: %v\n%s", id, err, out)
	}
	if turn := promptRetry(t, b.client, id, "back on host-a", 30*time.Second); turn.StopReason != "end_turn" {
		t.Errorf("turn back on host-a = %+v", turn)
	}
	s, err := a.client.Session(ctx, id)
	if err != nil || s.Host != "host-a" {
		t.Fatalf("session %s = host %q, %v; want host-a", id, s.Host, err)
	}
	if got, err := os.ReadFile(filepath.Join(s.Worktree.Path, "work.txt")); err != nil || string(got) != "back on host-a\n" {
		t.Errorf("work.txt back on host-a = %q, %v", got, err)
	}
	if d, err := a.client.Diff(ctx, id, 0); err != nil {
		t.Errorf("diff back on host-a: %v (%+v)", err, d.Stat)
	}

	// A session moved to host-b and never touched there comes back to
	// host-a by a take-over when host-b dies: host-a, which removed its
	// worktree at the hand-over, makes it again from the remote.
	bounce := create("host-a")
	if out, err := a.cli("session", "move", bounce, "host-b"); err != nil {
		t.Fatalf("session move %s host-b: %v\n%s", bounce, err, out)
	}
	time.Sleep(clusterTTL) // host-b holds it, untouched
	b.kill9()
	if turn := promptRetry(t, a.client, bounce, "after host-b died", clusterTTL+30*time.Second); turn.StopReason != "end_turn" {
		t.Fatalf("turn of %s after host-b died = %+v", bounce, turn)
	}
	s, err = a.client.Session(ctx, bounce)
	if err != nil || s.Host != "host-a" {
		t.Fatalf("session %s = host %q, %v; want host-a", bounce, s.Host, err)
	}
	if got, err := os.ReadFile(filepath.Join(s.Worktree.Path, "work.txt")); err != nil || string(got) != "after host-b died\n" {
		t.Errorf("work.txt of %s taken back = %q, %v", bounce, got, err)
	}
	if ms := movedEvents(t, a.client, bounce); len(ms) != 2 || ms[0]["reason"] != "move" || ms[1]["reason"] != "failover" || ms[1]["lost"] != "" {
		t.Errorf("session %s: session.moved %v; want the move, then a failover that lost nothing", bounce, ms)
	}
}

// TestEndToEndClusterTakeOverWave kills (SIGKILL) a host holding 14 idle
// sessions: the two survivors take them all over in one wave, each its
// share, every session within the TTL and 2 s of the kill, none reported
// as losing anything (their last turns were pushed). It reports the
// per-session take-over times.
func TestEndToEndClusterTakeOverWave(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three daemons")
	}
	f := startFenceCluster(t, "work", "--max-warm", "32")
	a, b, c, bare, remote := f.a, f.b, f.c, f.bare, f.remote
	ctx := context.Background()
	const n = 14
	var ids []string
	for range n {
		var created httpapi.CreatedSession
		if err := a.client.Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": remote, "agent": "work", "host": "host-c"}, &created); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, created.ID)
		promptRetry(t, a.client, created.ID, "pushed", 30*time.Second)
	}
	// The turns' pushes follow their ends: wait until each reached the
	// remote (and its record the store).
	for _, id := range ids {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			out, err := exec.Command("git", "-C", bare, "show", worktree.CheckpointRefPrefix+id+":work.txt").Output()
			if err == nil && strings.TrimSpace(string(out)) == "pushed" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the turn's checkpoint never reached the remote", id)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	// hosts counts the sessions leased to host-c, loaded or not (by its
	// next heartbeat).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		list, err := a.client.Hosts(ctx)
		i := slices.IndexFunc(list, func(h hosts.Status) bool { return h.ID == "host-c" })
		if err == nil && i >= 0 && list[i].Sessions == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hosts lists %+v, %v; want host-c with %d sessions", list, err, n)
		}
	}
	killed := time.Now()
	c.kill9()
	// Each session's take-over time is that of its session.moved, stamped
	// by the host that took it, in the transaction that took it.
	took := map[string]time.Duration{}
	for deadline := time.Now().Add(clusterTTL + 30*time.Second); len(took) < n; time.Sleep(100 * time.Millisecond) {
		for _, id := range ids {
			if _, ok := took[id]; ok {
				continue
			}
			evs, err := a.client.EventLog(ctx, id, 0)
			if err != nil {
				continue // moving
			}
			for _, ev := range evs {
				if ev.Type == backends.EventSessionMoved {
					took[id] = ev.Time.Sub(killed)
					var m map[string]any
					_ = json.Unmarshal(ev.Data, &m)
					t.Logf("%s taken over by %v %v after the kill", id, m["to"], took[id].Round(time.Millisecond))
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sessions taken over %v after the kill", len(took), n, time.Since(killed))
		}
	}
	times := make([]time.Duration, 0, n)
	for _, d := range took {
		times = append(times, d)
	}
	slices.Sort(times)
	p50, worst := times[len(times)/2], times[len(times)-1]
	t.Logf("take-over of %d sessions of a killed host (lease TTL %v): p50 %v, max %v after the kill; first %v, spread of the wave %v",
		n, clusterTTL, p50.Round(time.Millisecond), worst.Round(time.Millisecond), times[0].Round(time.Millisecond), (worst - times[0]).Round(time.Millisecond))
	if worst > clusterTTL+2*time.Second {
		t.Errorf("the last session was taken over %v after the kill; want within the TTL and 2s (%v)", worst, clusterTTL+2*time.Second)
	}
	per := map[string]int{}
	hs := sessionHosts(t, b.client)
	for _, id := range ids {
		per[hs[id]]++
		ms := movedEvents(t, a.client, id)
		if len(ms) != 1 || ms[0]["reason"] != "failover" || ms[0]["lost"] != "" {
			t.Errorf("session %s: session.moved %v; want one failover, nothing lost", id, ms)
		}
	}
	t.Logf("sessions per survivor: %v", per)
	if d := per["host-a"] - per["host-b"]; d > 4 || d < -4 {
		t.Errorf("sessions per survivor %v; want them dealt evenly over host-a and host-b", per)
	}
	if turn := promptRetry(t, b.client, ids[0], "after", 30*time.Second); turn.StopReason != "end_turn" {
		t.Errorf("turn after the take-over = %+v", turn)
	}
}

// freeLoopbackPort returns a TCP port free on ip at the time of the call.
func freeLoopbackPort(t *testing.T, ip string) int {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestTLSHostServesItsNames: a daemon serving HTTPS answers its clients
// by the name of --advertise, by its certificate's names and by the
// address of --addr, and refuses any other Host (403 forbidden_host).
func TestTLSHostServesItsNames(t *testing.T) {
	bin := agentpoolBinary(t)
	home := t.TempDir()
	ca, cert, keyFile := testcert.FilesForHosts(t, t.TempDir(), "host-a.example", "pool.example", "127.0.0.3")
	port := freeLoopbackPort(t, "127.0.0.2")
	listen := fmt.Sprintf("127.0.0.2:%d", port)
	d := startDaemon(t, bin, home, "AGENTPOOL_LISTEN="+listen, "AGENTPOOL_TLS_CERT="+cert, "AGENTPOOL_TLS_KEY="+keyFile,
		"AGENTPOOL_ADVERTISE="+fmt.Sprintf("https://advertised.example:%d", port))
	d.stopAtCleanup()
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	get := func(host string, verify bool) (int, string) {
		tr := &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, listen)
			},
			TLSClientConfig: &tls.Config{RootCAs: roots, InsecureSkipVerify: !verify},
		}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://%s/v1/hosts", net.JoinHostPort(host, strconv.Itoa(port))), nil)
		req.Header.Set("Authorization", "Bearer "+d.client.Token)
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("GET /v1/hosts as %s: %v", host, err)
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		return resp.StatusCode, body.String()
	}
	for _, h := range []struct {
		name   string
		verify bool
	}{{"host-a.example", true}, {"pool.example", true}, {"127.0.0.3", true}, {"advertised.example", false}, {"127.0.0.2", false}} {
		if code, body := get(h.name, h.verify); code != http.StatusOK {
			t.Errorf("GET /v1/hosts as %s = %d %s; want 200", h.name, code, body)
		}
	}
	if code, body := get("rebound.example", false); code != http.StatusForbidden || !strings.Contains(body, "forbidden_host") {
		t.Errorf("GET /v1/hosts as rebound.example = %d %s; want 403 forbidden_host", code, body)
	}
}

// TestEndToEndClusterWrongKeyRefused: a host started with another cluster
// key than the live hosts' refuses to join: it says why in its log and
// exits non-zero, and the other hosts never list it nor place a session
// on it. The key never crosses the wire (the hosts prove it with
// HMACs).
func TestEndToEndClusterWrongKeyRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three daemons")
	}
	url := startPostgres(t)
	bin := agentpoolBinary(t)
	key := clusterKeyFile(t)
	a := startFenceHost(t, bin, "host-a", t.TempDir(), url, key)
	b := startFenceHost(t, bin, "host-b", t.TempDir(), url, key)
	a.waitHosts(2)
	other := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(other, []byte("another-cluster-key-0123456789abcdef01234567\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The cluster goes on meanwhile: host-x is never listed.
	stop := make(chan struct{})
	seen := make(chan bool, 1)
	go func() {
		listed := false
		for {
			select {
			case <-stop:
				seen <- listed
				return
			case <-time.After(50 * time.Millisecond):
			}
			list, err := a.client.Hosts(context.Background())
			if err == nil && slices.ContainsFunc(list, func(h hosts.Status) bool { return h.ID == "host-x" }) {
				listed = true
			}
		}
	}()
	out, code := runRefusedHost(t, bin, "host-x", url, other)
	close(stop)
	if code == 0 {
		t.Errorf("host-x with another key exited with status 0; want non-zero")
	}
	if !strings.Contains(out, "cluster key") || !strings.Contains(out, "host-a") {
		t.Errorf("host-x's output does not say its key is not the cluster's:\n%s", out)
	}
	if <-seen {
		t.Error("host-a listed host-x")
	}
	// A session placed lands on a or b.
	var created httpapi.CreatedSession
	if err := b.client.Call(context.Background(), "POST", "/v1/sessions", map[string]any{"repo": e2eRepoAt(t, filepath.Join(t.TempDir(), "r"), map[string]string{"a": "a"}), "agent": "work"}, &created); err != nil || (created.Host != "host-a" && created.Host != "host-b") {
		t.Errorf("a session created after = host %q, %v", created.Host, err)
	}
}

// runRefusedHost runs host id with the cluster key file key, which must
// refuse to join, and returns its output and exit status (-1 when it still
// ran after a minute, and was killed).
func runRefusedHost(t *testing.T, bin, id, url, key string) (string, int) {
	t.Helper()
	home := t.TempDir()
	writeScripted(t, home, bin, clusterScripts())
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--lease-ttl", clusterTTL.String())
	cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home, "XDG_STATE_HOME="+t.TempDir(), "AGENTPOOL_STORE="+url,
		"AGENTPOOL_HOST_ID="+id, clusterKeyEnv+"="+key)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t.Cleanup(func() { removeCgroupTree(home) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		return out.String(), ee.ExitCode()
	}
	return out.String(), -1
}

// TestEndToEndClusterColdStart stops every host of the cluster for longer
// than the TTL and starts them again a second apart: each host claims its
// own sessions, and none is taken over as a failover (no session.moved,
// nothing reported lost).
func TestEndToEndClusterColdStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three daemons")
	}
	url := startPostgres(t)
	bin := agentpoolBinary(t)
	key := clusterKeyFile(t)
	remote := "file://" + sharedBare(t)
	names := []string{"host-a", "host-b", "host-c"}
	homes := map[string]string{}
	var all []*clusterHost
	for _, id := range names {
		homes[id] = t.TempDir()
		all = append(all, startFenceHost(t, bin, id, homes[id], url, key))
	}
	for _, h := range all {
		h.waitHosts(3)
	}
	waitAgents(t, all, "work")
	ctx := context.Background()
	owner := map[string]string{}
	for _, id := range names {
		for range 2 {
			var created httpapi.CreatedSession
			if err := all[0].client.Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": remote, "agent": "work", "host": id}, &created); err != nil {
				t.Fatal(err)
			}
			promptRetry(t, all[0].client, created.ID, "before", 30*time.Second)
			owner[created.ID] = id
		}
	}
	for _, h := range all {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		_ = h.cmd.Wait()
	}
	time.Sleep(clusterTTL + time.Second)
	all = all[:0]
	for _, id := range names {
		all = append(all, startFenceHost(t, bin, id, homes[id], url, key))
		time.Sleep(time.Second)
	}
	time.Sleep(2 * clusterTTL)
	hs := sessionHosts(t, all[2].client)
	for id, own := range owner {
		if hs[id] != own {
			t.Errorf("session %s is on %q after the cold start; want its own host %s", id, hs[id], own)
		}
		if ms := movedEvents(t, all[1].client, id); len(ms) != 0 {
			t.Errorf("session %s: session.moved %v after a cold start; want none", id, ms)
		}
		if turn := promptRetry(t, all[0].client, id, "after", 30*time.Second); turn.StopReason != "end_turn" {
			t.Errorf("turn of %s after the cold start = %+v", id, turn)
		}
	}
	// A starting host reconciles only the worktrees on its own disk: the
	// other hosts' are no "worktree problem" of its.
	for _, h := range all {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		_ = h.cmd.Wait()
		if out := h.out.String(); strings.Contains(out, "worktree problem") || strings.Contains(out, "worktree missing on disk") {
			t.Errorf("%s logged a worktree problem at start:\n%s", h.id, out)
		}
	}
}

// TestEndToEndPostgresRestartAnswers503: requests sent while the
// PostgreSQL server restarts are answered, or refused 503
// store_unavailable with a Retry-After (nothing done: send again), never
// 500; once it is back, the session works on.
func TestEndToEndPostgresRestartAnswers503(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a daemon on PostgreSQL")
	}
	pg, err := pgtest.Start()
	agenttest.RequireFeature(t, err == nil, "PostgreSQL: "+errString(err))
	t.Cleanup(func() { _ = pg.Stop() })
	url, err := pg.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bin := agentpoolBinary(t)
	// The default TTL: a restart shorter than half of it costs the host
	// none of its sessions.
	a := startFenceHost(t, bin, "host-a", t.TempDir(), url, clusterKeyFile(t), "--lease-ttl", "10s")
	ctx := context.Background()
	var created httpapi.CreatedSession
	if err := a.client.Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": "file://" + sharedBare(t), "agent": "work"}, &created); err != nil {
		t.Fatal(err)
	}
	id := created.ID
	promptRetry(t, a.client, id, "before", 30*time.Second)
	restarted := make(chan error, 1)
	go func() { restarted <- pg.Restart(4 * time.Second) }()
	statuses := map[string]int{}
	for end := time.Now().Add(7 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var turn map[string]any
		err := a.client.Call(rctx, "POST", "/v1/sessions/"+id+"/prompt?wait=true", map[string]any{"text": "during"}, &turn)
		cancel()
		var ae *httpapi.Error
		switch {
		case err == nil:
			statuses["200"]++
		case errors.As(err, &ae):
			statuses[fmt.Sprint(ae.Status, " ", ae.Code, ": ", ae.Message)]++
			if ae.Status != http.StatusServiceUnavailable {
				t.Errorf("a prompt during the restart: %v; want it answered, or 503", err)
			}
			if ae.Code == httpapi.CodeStoreUnavailable && ae.RetryAfter <= 0 {
				t.Errorf("503 store_unavailable without Retry-After")
			}
		default:
			statuses["transport: "+err.Error()]++
		}
		var sess map[string]any
		if err := a.client.Call(ctx, "GET", "/v1/sessions/"+id, nil, &sess); err != nil {
			if errors.As(err, &ae) && ae.Status == http.StatusInternalServerError {
				t.Errorf("a read during the restart: %v", err)
			}
		}
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	t.Logf("prompts sent while PostgreSQL restarted: %v", statuses)
	if turn := promptRetry(t, a.client, id, "after", 30*time.Second); turn.StopReason != "end_turn" {
		t.Errorf("turn after the restart = %+v", turn)
	}
}
