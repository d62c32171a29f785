package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
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

// The TestAgentWorld tests attack, through the built binary, what lies
// outside an agent's world: the user's sockets, the host's loopback
// services and the daemon's own port, the daemon's database, other
// processes, capabilities. Each attack names what Landlock alone (the
// confinement before agents had namespaces of their own) let through.

// worldAttack is one attack of a hostile agent: its provider's sandbox,
// the steps of its one turn, and the check of what came of them, seen
// from the agent's side and from the host's.
type worldAttack struct {
	name string
	// sandbox is the provider's; nil: ~/.fake-agent writable, the
	// network "all" (every public address, through the egress proxy).
	sandbox map[string]any
	steps   []agenttest.Step
	check   func(t *testing.T, w *world, id string, chunks []string)
}

// makeAttack prepares an attack before the daemon starts: its servers
// and stand-ins, and steps that may aim at the daemon's address.
type makeAttack func(t *testing.T, w *world) worldAttack

// world is a confineFixture whose daemon's address is chosen before it
// starts, run by the test's user or, with user set, by another.
type world struct {
	*confineFixture
	addr string
	user *otherUser
	d    *daemon
	out  *lockedBuffer
}

// newWorld makes a world in the test's temporary directory, run by the
// test's user.
func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{confineFixture: newConfineFixture(t)}
	w.addr = freeLoopback(t)
	w.port, _ = strconv.Atoi(w.addr[strings.LastIndexByte(w.addr, ':')+1:])
	return w
}

// freeLoopback returns a loopback address nobody listens on now.
func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// uid is the uid of the daemon's user, as its agents' paths name it.
func (w *world) uid() int {
	if w.user != nil {
		return int(w.user.uid)
	}
	return os.Getuid()
}

// own gives path to the daemon's user, when it is another.
func (w *world) own(t *testing.T, paths ...string) {
	t.Helper()
	if w.user != nil {
		w.user.give(t, paths...)
	}
}

// prepare makes each attack and writes one provider per attack, "w-NAME".
func (w *world) prepare(t *testing.T, makes ...makeAttack) []worldAttack {
	t.Helper()
	var attacks []worldAttack
	providers := map[string]any{}
	for _, mk := range makes {
		a := mk(t, w)
		sb := a.sandbox
		if sb == nil {
			sb = map[string]any{"write": []string{"~/.fake-agent"}, "network": "all"}
		}
		providers["w-"+a.name] = w.hostileProvider(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: a.steps}}}, sb)
		attacks = append(attacks, a)
	}
	w.writeProviders(t, providers)
	return attacks
}

// start runs the daemon on w.addr with env added to its environment,
// as the test's user.
func (w *world) start(t *testing.T, env ...string) {
	t.Helper()
	t.Setenv("HOME", w.fakeHome)
	w.d = startDaemon(t, w.bin, w.home, append([]string{"AGENTPOOL_LISTEN=" + w.addr}, env...)...)
	w.d.stopAtCleanup()
}

// requireNamespaces skips (fails under CI=true) when the daemon's agents
// have no namespaces of their own.
func (w *world) requireNamespaces(t *testing.T) {
	t.Helper()
	st := health(t, w.d)
	agenttest.RequireFeature(t, st.Namespaces, "namespaces for agents ("+st.NamespacesError+")")
}

// attack runs each attack in a session of its own, as a subtest.
func (w *world) attack(t *testing.T, attacks []worldAttack) {
	t.Helper()
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			agent := "w-" + a.name
			waitProviderReady(t, w.d, agent)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			s, err := w.d.client.CreateSession(ctx, pool.CreateRequest{Repo: w.repo, Agent: agent})
			if err != nil {
				t.Fatalf("create session: %v\ndaemon log:\n%s", err, w.log())
			}
			a.check(t, w, s.ID, turnChunks(t, w.d, s.ID))
			if t.Failed() {
				t.Logf("daemon log:\n%s", w.log())
			}
		})
	}
}

// log is the daemon's output.
func (w *world) log() string {
	if w.out != nil {
		return w.out.String()
	}
	return w.d.out.String()
}

// sysWant is what one Sys step must report: its op, its status, and
// (when set) what its Data starts with.
type sysWant struct{ op, status, data string }

// checkSys checks the Sys results among chunks against wants, in order,
// and returns them.
func checkSys(t *testing.T, chunks []string, wants ...sysWant) []agenttest.SysResult {
	t.Helper()
	var got []agenttest.SysResult
	for _, c := range chunks {
		if r, ok := agenttest.ParseSysResult(c); ok {
			got = append(got, r)
		}
	}
	if len(got) != len(wants) {
		t.Fatalf("%d sys results %q; want %d", len(got), got, len(wants))
	}
	for i, w := range wants {
		if r := got[i]; r.Op != w.op || r.Status != w.status || !strings.HasPrefix(r.Data, w.data) {
			t.Errorf("step %d: %s; want %s %s %q…", i, r, w.op, w.status, w.data)
		}
	}
	return got
}

// hostListener is a socket of the host's that counts the connections
// it accepts (and hangs up on, after greeting).
type hostListener struct {
	l        net.Listener
	accepted atomic.Int64
}

// listenHost listens on addr (network "unix" or "tcp") until the test
// ends, answering each connection with greeting.
func listenHost(t *testing.T, network, addr, greeting string) *hostListener {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	h := &hostListener{l: l}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Write([]byte(greeting))
			_ = c.Close()
		}
	}()
	return h
}

// live dials h from the host, proving it answers; the connection counts.
func (h *hostListener) live(t *testing.T) {
	t.Helper()
	c, err := net.DialTimeout(h.l.Addr().Network(), h.l.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatalf("the host's %s does not answer the host: %v", h.l.Addr(), err)
	}
	_ = c.Close()
	for deadline := time.Now().Add(2 * time.Second); h.accepted.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

// standIn makes dir, with a socket sock in it, unless dir exists: a
// stand-in for a directory of the user's sockets that this machine
// lacks, removed when the test ends. It returns the socket's path.
func standIn(t *testing.T, w *world, dir string, mode os.FileMode, sock string) string {
	t.Helper()
	path := filepath.Join(dir, sock)
	if _, err := os.Lstat(dir); err == nil {
		return path
	}
	if err := os.Mkdir(dir, mode); err != nil {
		t.Skipf("cannot make a stand-in %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	listenHost(t, "unix", path, "")
	w.own(t, dir, path)
	return path
}

// standInSocket listens on path unless something is there.
func standInSocket(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); err == nil {
		return
	}
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		t.Skipf("no %s for a stand-in %s", filepath.Dir(path), path)
	}
	listenHost(t, "unix", path, "")
}

// refusedEvent is the data of a network.refused event.
type refusedEvent struct {
	Host   string `json:"host"`
	Port   uint16 `json:"port"`
	Reason string `json:"reason"`
	Allow  string `json:"allow"`
}

// waitRefusals waits until the session's events hold a network.refused
// event for each of want (host, port and allow matched), and returns them
// all.
func waitRefusals(t *testing.T, w *world, id string, want ...refusedEvent) []refusedEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, err := w.d.client.EventLog(context.Background(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []refusedEvent
		for _, ev := range evs {
			var r refusedEvent
			if ev.Type == backends.EventType("network.refused") && json.Unmarshal(ev.Data, &r) == nil {
				got = append(got, r)
			}
		}
		missing := 0
		for _, wr := range want {
			found := false
			for _, r := range got {
				found = found || r.Host == wr.Host && r.Port == wr.Port && r.Allow == wr.Allow && r.Reason != ""
			}
			if !found {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("network.refused events %+v; want %+v among them", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// randomName returns a short random hex string.
func randomName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestAgentWorld: a hostile agent of a root daemon reaches nothing of
// the host but its grants: not the user's sockets, not the host's
// loopback services nor the daemon's port (the egress proxy refuses
// them, and says so in the session's events, unless the provider lists
// one), not other processes, not a capability; its terminals share its
// /tmp and its loopback.
func TestAgentWorld(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	w := newWorld(t)
	attacks := w.prepare(t, attackSockets, attackLoopback, attackListedLoopback, attackProcesses, attackCapabilities, attackTerminal, attackHistory)
	w.start(t)
	w.requireNamespaces(t)
	w.attack(t, attacks)
}
