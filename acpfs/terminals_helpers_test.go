package acpfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// eventLog collects TerminalEvents.
type eventLog struct {
	mu  sync.Mutex
	evs []TerminalEvent
}

func (l *eventLog) record(ev TerminalEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
}

// of returns the events of terminal id, in order.
func (l *eventLog) of(id string) []TerminalEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []TerminalEvent
	for _, ev := range l.evs {
		if ev.ID == id {
			out = append(out, ev)
		}
	}
	return out
}

// fakeTimers is the clock seam of TerminalsConfig: timers fire only when
// the test says so.
type fakeTimers struct {
	mu        sync.Mutex
	durations []time.Duration
	chans     []chan time.Time
}

func (f *fakeTimers) newTimer(d time.Duration) (<-chan time.Time, func() bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	f.durations = append(f.durations, d)
	f.chans = append(f.chans, ch)
	return ch, func() bool { return true }
}

// fire fires the i-th timer created and returns its duration.
func (f *fakeTimers) fire(t *testing.T, i int) time.Duration {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.chans) {
		t.Fatalf("fire timer %d: only %d created", i, len(f.chans))
	}
	f.chans[i] <- time.Now()
	return f.durations[i]
}

// newTestTerminals opens Terminals on a fresh worktree; Close runs at the
// end of the test.
func newTestTerminals(t *testing.T, cfg TerminalsConfig) (*Terminals, string, *eventLog) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := &eventLog{}
	cfg.Root = root
	cfg.OnEvent = log.record
	terms, err := NewTerminals(cfg)
	if err != nil {
		t.Fatalf("NewTerminals(%+v) error = %v", cfg, err)
	}
	t.Cleanup(func() {
		if err := terms.Close(); err != nil {
			t.Errorf("Close() error = %v", err)
		}
	})
	return terms, root, log
}

// waitOutput polls terminal id until its output contains want, and returns
// the output.
func waitOutput(t *testing.T, terms *Terminals, id, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := terms.Output(id)
		if err != nil {
			t.Fatalf("Output(%q) error = %v", id, err)
		}
		if strings.Contains(out.Output, want) {
			return out.Output
		}
		if time.Now().After(deadline) {
			t.Fatalf("Output(%q) = %q; never contained %q", id, out.Output, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// firstPID parses the first line of out as a pid.
func firstPID(t *testing.T, out string) int {
	t.Helper()
	line, _, _ := strings.Cut(out, "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 1 {
		t.Fatalf("first line of %q is not a pid: %v", out, err)
	}
	return pid
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// waitDead fails t unless every pid is dead within a few seconds. A killed
// grandchild is reparented and reaped by init, which takes a moment.
func waitDead(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still alive", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func intp(n int) *int       { return &n }
func strp(s string) *string { return &s }
