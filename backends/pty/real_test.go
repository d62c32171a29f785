package pty_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/pty"
)

// TestRealInteractivePrograms drives real interactive programs through
// turns: bash with readline (which asks for bracketed paste) and the
// python REPL, then cancels a long command with Ctrl-C.
func TestRealInteractivePrograms(t *testing.T) {
	type turn struct{ text, want string }
	tests := []struct {
		name    string
		program string
		args    []string
		env     []string
		pattern string
		turns   []turn
		long    string // a command to cancel
		// running waits until the long command runs, so that Ctrl-C
		// reaches it rather than the shell before it forks.
		running func(t *testing.T, b *pty.Backend, pid int)
	}{
		{
			name: "bash", program: "bash", args: []string{"--norc", "--noprofile", "-i"},
			env:     []string{"PS1=agentpool$ ", "HISTFILE=", "PROMPT_COMMAND="},
			pattern: `^agentpool\$ $`,
			turns: []turn{
				{"echo hello", "hello"},
				{"x=6; echo $((x*7))", "42"},
				{"echo one\necho two", "one\ntwo"},
			},
			long: "sleep 30",
			running: func(t *testing.T, _ *pty.Backend, pid int) {
				// The child has exec'd sleep, so it has taken the
				// terminal's foreground.
				waitFor(t, "sleep in the session", func() bool {
					for _, m := range pty.SessionMembers(pid) {
						if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(m) + "/comm"); strings.TrimSpace(string(comm)) == "sleep" {
							return true
						}
					}
					return false
				})
			},
		},
		{
			name: "python", program: "python3", args: []string{"-i", "-q"},
			env:     []string{"PYTHONSTARTUP=", "PYTHON_BASIC_REPL=1"},
			pattern: `^>>> $`,
			turns: []turn{
				{"print(6*7)", "42"},
				{"import time; time.sleep(0.2); print('done')", "done"},
			},
			long: "print('sleeping'); time.sleep(30)",
			running: func(t *testing.T, b *pty.Backend, _ int) {
				waitFor(t, "python sleeping", func() bool { return strings.Contains(b.Screen(), "\nsleeping") })
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, err := exec.LookPath(tt.program)
			if err != nil {
				t.Skipf("%s not installed", tt.program)
			}
			spec := backends.Spec{
				Provider: tt.name, Kind: backends.KindPTY, Path: path, Args: tt.args, Env: tt.env, Dir: t.TempDir(),
				PTY: backends.PTYSpec{ReadyPattern: tt.pattern},
			}
			h := newHarness(t, pty.Config{Spec: spec, CancelGrace: 5 * time.Second})
			info := h.start(t, "")
			for _, tr := range tt.turns {
				h.turn.reset()
				res, err := h.prompt(t, tr.text)
				if err != nil || res.StopReason != backends.StopEndTurn {
					t.Fatalf("Prompt(%q) = %+v, %v; want end_turn", tr.text, res, err)
				}
				if got := h.turn.chunks(); len(got) != 1 || got[0] != tr.want {
					t.Errorf("Prompt(%q) chunks = %q; want [%q]\nscreen:\n%s", tr.text, got, tr.want, h.b.Screen())
				}
			}

			h.turn.reset()
			done := make(chan struct{})
			var res backends.TurnResult
			go func() {
				defer close(done)
				res, err = h.prompt(t, tt.long)
			}()
			tt.running(t, h.b, info.PID)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := h.b.Cancel(ctx); err != nil {
				t.Fatalf("Cancel() = %v", err)
			}
			<-done
			if err != nil || res.StopReason != backends.StopCancelled {
				t.Fatalf("cancelled Prompt(%q) = %+v, %v; want cancelled", tt.long, res, err)
			}
			if res.Duration > 5*time.Second {
				t.Errorf("cancelled Prompt(%q) took %v; Ctrl-C did not interrupt it", tt.long, res.Duration)
			}
			if members := pty.SessionMembers(info.PID); len(members) != 1 {
				t.Errorf("SessionMembers(%d) after Ctrl-C = %v; want only the program", info.PID, members)
			}
			h.turn.reset()
			last := tt.turns[0]
			if res, err := h.prompt(t, last.text); err != nil || res.StopReason != backends.StopEndTurn {
				t.Fatalf("Prompt(%q) after cancel = %+v, %v", last.text, res, err)
			}
			if got := h.turn.chunks(); len(got) != 1 || got[0] != last.want {
				t.Errorf("Prompt(%q) after cancel chunks = %q; want [%q]", last.text, got, last.want)
			}
		})
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
