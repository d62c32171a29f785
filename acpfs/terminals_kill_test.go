package acpfs

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// grandchildLine starts a background grandchild, prints its pid and waits.
const grandchildLine = "sleep 300 & echo $!; wait"

func TestTerminalTimeoutKillsGroup(t *testing.T) {
	timers := &fakeTimers{}
	terms, _, log := newTestTerminals(t, TerminalsConfig{newTimer: timers.newTimer})
	id, err := terms.Create(context.Background(), TerminalRequest{Command: grandchildLine})
	if err != nil {
		t.Fatal(err)
	}
	grandchild := firstPID(t, waitOutput(t, terms, id, "\n"))
	leader := log.of(id)[0].PID
	if !alive(grandchild) || !alive(leader) {
		t.Fatalf("leader %d or grandchild %d not running before the timeout", leader, grandchild)
	}
	if d := timers.fire(t, 0); d != DefaultTerminalTimeout {
		t.Errorf("timeout timer duration = %v; want the default %v", d, DefaultTerminalTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := terms.WaitForExit(ctx, id)
	if err != nil {
		t.Fatalf("WaitForExit(%q) error = %v", id, err)
	}
	if diff := cmp.Diff(ExitStatus{Signal: strp("SIGKILL")}, st); diff != "" {
		t.Errorf("WaitForExit after timeout (-want +got):\n%s", diff)
	}
	waitDead(t, leader, grandchild)
	if evs := log.of(id); len(evs) != 2 || !evs[1].TimedOut || evs[1].Signal == nil || *evs[1].Signal != "SIGKILL" {
		t.Errorf("events of %s = %+v; want an exit event, timed out by SIGKILL", id, evs)
	}
}

func TestTerminalRealTimeout(t *testing.T) {
	terms, _, log := newTestTerminals(t, TerminalsConfig{Timeout: 50 * time.Millisecond})
	id, _, st := run(t, terms, TerminalRequest{Command: "sleep", Args: []string{"300"}})
	if st.Signal == nil || *st.Signal != "SIGKILL" {
		t.Errorf("WaitForExit = %v; want SIGKILL", st)
	}
	if evs := log.of(id); len(evs) != 2 || !evs[1].TimedOut {
		t.Errorf("events of %s = %+v; want timed out", id, evs)
	}
}

func TestTerminalMaxRunning(t *testing.T) {
	for _, max := range []int{0, 1} {
		terms, _, _ := newTestTerminals(t, TerminalsConfig{MaxRunning: max})
		want := max
		if want == 0 {
			want = DefaultMaxRunning
		}
		var ids []string
		for range want {
			id, err := terms.Create(context.Background(), TerminalRequest{Command: "sleep", Args: []string{"300"}})
			if err != nil {
				t.Fatalf("MaxRunning %d: Create #%d error = %v", max, len(ids)+1, err)
			}
			ids = append(ids, id)
		}
		if _, err := terms.Create(context.Background(), TerminalRequest{Command: "true"}); !errors.Is(err, ErrTooManyTerminals) {
			t.Fatalf("MaxRunning %d: Create #%d error = %v; want ErrTooManyTerminals", max, want+1, err)
		}
		// An exited terminal no longer counts, even before it is released.
		if err := terms.Kill(ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := terms.WaitForExit(context.Background(), ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := terms.Create(context.Background(), TerminalRequest{Command: "true"}); err != nil {
			t.Errorf("MaxRunning %d: Create after one exited error = %v; want nil", max, err)
		}
	}
}

func TestTerminalKillKeepsID(t *testing.T) {
	terms, _, log := newTestTerminals(t, TerminalsConfig{})
	id, err := terms.Create(context.Background(), TerminalRequest{Command: grandchildLine})
	if err != nil {
		t.Fatal(err)
	}
	grandchild := firstPID(t, waitOutput(t, terms, id, "\n"))
	if err := terms.Kill(id); err != nil {
		t.Fatalf("Kill(%q) error = %v", id, err)
	}
	st, err := terms.WaitForExit(context.Background(), id)
	if err != nil || st.Signal == nil || *st.Signal != "SIGKILL" {
		t.Fatalf("WaitForExit(%q) after Kill = %v, %v; want SIGKILL", id, st, err)
	}
	out, err := terms.Output(id)
	if err != nil || out.Exit == nil || !cmp.Equal(*out.Exit, st) || out.Output == "" {
		t.Errorf("Output(%q) after Kill = %+v, %v; want the output and the exit", id, out, err)
	}
	if err := terms.Kill(id); err != nil {
		t.Errorf("second Kill(%q) error = %v; want nil", id, err)
	}
	waitDead(t, log.of(id)[0].PID, grandchild)
	if err := terms.Release(id); err != nil {
		t.Errorf("Release(%q) after Kill error = %v", id, err)
	}
}

func TestTerminalReleaseKills(t *testing.T) {
	terms, _, log := newTestTerminals(t, TerminalsConfig{})
	id, err := terms.Create(context.Background(), TerminalRequest{Command: grandchildLine})
	if err != nil {
		t.Fatal(err)
	}
	grandchild := firstPID(t, waitOutput(t, terms, id, "\n"))
	leader := log.of(id)[0].PID
	if err := terms.Release(id); err != nil {
		t.Fatalf("Release(%q) error = %v", id, err)
	}
	if alive(leader) {
		t.Errorf("leader %d alive after Release returned", leader)
	}
	waitDead(t, grandchild)
	if _, err := terms.Output(id); !errors.Is(err, ErrUnknownTerminal) {
		t.Errorf("Output(%q) after Release error = %v; want ErrUnknownTerminal", id, err)
	}
	if _, err := terms.WaitForExit(context.Background(), id); !errors.Is(err, ErrUnknownTerminal) {
		t.Errorf("WaitForExit(%q) after Release error = %v; want ErrUnknownTerminal", id, err)
	}
	for _, f := range []func(string) error{terms.Kill, terms.Release} {
		if err := f(id); !errors.Is(err, ErrUnknownTerminal) {
			t.Errorf("Kill/Release(%q) after Release error = %v; want ErrUnknownTerminal", id, err)
		}
	}
	if evs := log.of(id); len(evs) != 2 || evs[1].Signal == nil || *evs[1].Signal != "SIGKILL" || evs[1].TimedOut {
		t.Errorf("events of %s = %+v; want an exit by SIGKILL, not a timeout", id, evs)
	}
	if err := terms.Release("term-999"); !errors.Is(err, ErrUnknownTerminal) {
		t.Errorf("Release(never issued) error = %v; want ErrUnknownTerminal", err)
	}
}

func TestWaitForExitHonoursContext(t *testing.T) {
	terms, _, _ := newTestTerminals(t, TerminalsConfig{})
	id, err := terms.Create(context.Background(), TerminalRequest{Command: "sleep", Args: []string{"300"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := terms.WaitForExit(ctx, id)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("WaitForExit(cancelled) error = %v; want context.Canceled", err)
	}
	if out, err := terms.Output(id); err != nil || out.Exit != nil {
		t.Errorf("Output(%q) after a cancelled wait = %+v, %v; want still running", id, out, err)
	}
}

func TestTerminalExitKillsLeftovers(t *testing.T) {
	terms, _, _ := newTestTerminals(t, TerminalsConfig{})
	id, out, st := run(t, terms, TerminalRequest{Command: "sleep 300 & echo $!"})
	if st.ExitCode == nil || *st.ExitCode != 0 {
		t.Errorf("WaitForExit(%q) = %v; want exit 0", id, st)
	}
	waitDead(t, firstPID(t, out.Output))
}

func TestTerminalsClose(t *testing.T) {
	root := t.TempDir()
	terms, err := NewTerminals(TerminalsConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	var ids []string
	for range DefaultMaxRunning {
		id, err := terms.Create(context.Background(), TerminalRequest{Command: grandchildLine})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		pids = append(pids, firstPID(t, waitOutput(t, terms, id, "\n")))
	}
	if err := terms.Close(); err != nil {
		t.Fatalf("Close() error = %v", err)
	}
	waitDead(t, pids...)
	if err := terms.Close(); err != nil {
		t.Errorf("second Close() error = %v; want nil", err)
	}
	if _, err := terms.Create(context.Background(), TerminalRequest{Command: "true"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Create after Close error = %v; want ErrClosed", err)
	}
	if _, err := terms.Output(ids[0]); !errors.Is(err, ErrUnknownTerminal) {
		t.Errorf("Output after Close error = %v; want ErrUnknownTerminal", err)
	}
	if _, err := terms.guard.Resolve(terms.guard.Root() + "/x"); err == nil {
		t.Errorf("own guard still usable after Close")
	}
}

func TestTerminalsSharedGuardStaysOpen(t *testing.T) {
	g, err := NewGuard(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	terms, err := NewTerminals(TerminalsConfig{Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	if err := terms.Close(); err != nil {
		t.Fatal(err)
	}
	if rel, err := g.Resolve(g.Root() + "/x"); err != nil || rel != "x" {
		t.Errorf("shared guard after Terminals.Close: Resolve = %q, %v; want \"x\", nil", rel, err)
	}
}

func TestNewTerminalsConfig(t *testing.T) {
	dir := t.TempDir()
	for _, cfg := range []TerminalsConfig{
		{},
		{Root: dir + "/missing"},
		{Root: dir, MaxRunning: -1},
		{Root: dir, OutputCap: -1},
		{Root: dir, Timeout: -time.Second},
	} {
		if terms, err := NewTerminals(cfg); err == nil {
			terms.Close()
			t.Errorf("NewTerminals(%+v) error = nil; want an error", cfg)
		}
	}
	terms, err := NewTerminals(TerminalsConfig{Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer terms.Close()
	c := terms.cfg
	if c.MaxRunning != DefaultMaxRunning || c.OutputCap != DefaultOutputCap || c.Timeout != DefaultTerminalTimeout || len(c.Env) == 0 || terms.log == nil {
		t.Errorf("NewTerminals defaults = %+v; want %d, %d, %v, os.Environ(), a logger", c, DefaultMaxRunning, DefaultOutputCap, DefaultTerminalTimeout)
	}
}

// TestTerminalDiesWithDaemon kills a helper process that started a terminal
// and checks that the terminal's command dies with it (parent-death signal).
func TestTerminalDiesWithDaemon(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=orphan", "ACPFS_TEST_ROOT="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper output %q: %v", line, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q; want a pid", line)
	}
	if !alive(pid) {
		t.Fatalf("terminal %d not running before the helper dies", pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	waitDead(t, pid)
}
