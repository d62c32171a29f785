package backends_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
)

func TestMain(m *testing.M) {
	agenttest.Dispatch()
	goleak.VerifyTestMain(m)
}

func startHelper(t *testing.T, s agenttest.Script, cfg backends.ProcessConfig) *backends.Process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Path = exe
	cfg.Env = agenttest.Env(agenttest.HelperACP, s)
	p, err := backends.StartProcess(cfg)
	if err != nil {
		t.Fatalf("StartProcess: %v", err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return p
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStopRemovesGrandchild(t *testing.T) {
	p := startHelper(t, agenttest.Script{Grandchild: true, IgnoreSIGTERM: true}, backends.ProcessConfig{StopGrace: 50 * time.Millisecond, KillGrace: 100 * time.Millisecond})
	waitFor(t, "two processes in the group", func() bool { return len(backends.GroupMembers(p.PID())) == 2 })
	start := time.Now()
	if err := p.Stop(context.Background()); err != nil {
		t.Fatalf("Stop() error = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %v", d)
	}
	if m := backends.GroupMembers(p.PID()); len(m) != 0 {
		t.Fatalf("group %d still has members %v after Stop", p.PID(), m)
	}
	if backends.GroupAlive(p.PID()) {
		t.Fatalf("GroupAlive(%d) = true after Stop", p.PID())
	}
	ee := p.ExitError()
	if ee == nil || !ee.Expected {
		t.Fatalf("ExitError() = %+v; want an expected exit", ee)
	}
	// Idempotent.
	if err := p.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop() error = %v", err)
	}
}

func TestStopClosesStdinFirst(t *testing.T) {
	// A well-behaved agent exits when its stdin closes: no signal needed.
	p := startHelper(t, agenttest.Script{}, backends.ProcessConfig{StopGrace: 5 * time.Second})
	start := time.Now()
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Stop took %v; the agent should exit on stdin close", d)
	}
	if st := p.ExitError().Status; st != "exit status 0" {
		t.Errorf("exit status = %q; want a clean exit", st)
	}
}

func TestSIGTERMIgnoringProcessIsKilled(t *testing.T) {
	p := startHelper(t, agenttest.Script{IgnoreSIGTERM: true, StopReadingAfterNew: true}, backends.ProcessConfig{StopGrace: 50 * time.Millisecond, KillGrace: 50 * time.Millisecond})
	// Keep the agent from exiting on stdin EOF: it is blocked in session/new.
	_, _ = p.Stdin().Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}` + "\n"))
	// Stop only once the agent ignores SIGTERM: on a loaded machine its
	// start may take longer than any fixed pause.
	deadline := time.Now().Add(10 * time.Second)
	for !ignoresSIGTERM(t, p.PID()) {
		if time.Now().After(deadline) {
			t.Fatal("the agent did not come to ignore SIGTERM within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := p.ExitError().Status; st != "signal: killed" {
		t.Errorf("exit status = %q; want signal: killed", st)
	}
}

func TestStderrTailOnCrash(t *testing.T) {
	code := 7
	p := startHelper(t, agenttest.Script{ExitBeforeHandshake: &code, StderrFlood: 500}, backends.ProcessConfig{TailLines: 5})
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("process did not exit")
	}
	ee := p.ExitError()
	if ee.Expected || ee.Status != "exit status 7" {
		t.Fatalf("ExitError() = %+v; want unexpected exit status 7", ee)
	}
	lines := strings.Split(ee.StderrTail, "\n")
	if len(lines) != 5 || !strings.Contains(lines[4], "exiting before the handshake") {
		t.Fatalf("stderr tail = %q; want the last 5 lines ending with the exit message", ee.StderrTail)
	}
	if !strings.Contains(ee.Error(), "exit status 7") || !strings.Contains(ee.Error(), "last stderr") {
		t.Errorf("Error() = %q; want status and stderr", ee.Error())
	}
}

func TestTail(t *testing.T) {
	tl := backends.NewTail(3, 5)
	for _, s := range []string{"a", "b", "c", "d", "toolongline"} {
		tl.Add(s)
	}
	if got, want := tl.String(), "c\nd\ntoolo…"; got != want {
		t.Fatalf("Tail = %q; want %q", got, want)
	}
}

func TestProcStartTicks(t *testing.T) {
	a, err := backends.ProcStartTicks(os.Getpid())
	if err != nil || a == 0 {
		t.Fatalf("ProcStartTicks(self) = %d, %v", a, err)
	}
	if _, err := backends.ProcStartTicks(1 << 30); err == nil {
		t.Fatal("ProcStartTicks(no such pid) error = nil")
	}
}

// ignoresSIGTERM says whether process pid ignores SIGTERM (its SigIgn
// mask in /proc/PID/status has signal 15's bit).
func ignoresSIGTERM(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(15-1)) != 0
		}
	}
	return false
}
