package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// TestPromptShowsSetup: a turn that waits for the worktree's setup shows
// it on the prompt command's notes — the wait with the command, its output
// bounded, and how it ended — whether the setup started before the prompt
// (session new, then prompt) or with it, and not a setup that ended before.
func TestPromptShowsSetup(t *testing.T) {
	cmd := []string{"sh", "-c", "make deps"}
	started := map[string]any{"command": cmd, "timeout": "10m0s"}
	var lines []string
	for i := range 15 {
		lines = append(lines, fmt.Sprintf("fetching dependency %d", i))
	}
	output := map[string]any{"output": strings.Join(lines, "\n") + "\n"}
	failed := map[string]any{"ok": false, "exit_code": 3, "elapsed_ns": int64(2 * time.Second), "error": "exit status 3",
		"tail": []string{"a", "b", "c", "d", "e", "f", "no such file: deps.lock"}}
	ok := map[string]any{"ok": true, "exit_code": 0, "elapsed_ns": int64(8 * time.Second)}
	type step struct {
		typ  backends.EventType
		data any
	}
	for _, tc := range []struct {
		name          string
		before, after []step // events before the prompt, and while its turn waits
		want, not     []string
		fails         bool
	}{
		{
			name:   "running before the prompt, fails",
			before: []step{{pool.EventSetupStarted, started}},
			after:  []step{{pool.EventSetupOutput, output}, {pool.EventSetupEnded, failed}},
			want: []string{
				"waiting for the worktree's setup: sh -c 'make deps'… (follow: agentpool events s1)\n",
				"  │ fetching dependency 0\n", "  │ fetching dependency 9\n",
				"  │ … (all its output: agentpool events s1)\n",
				"setup failed in 2s with exit code 3\n",
				"  │ c\n  │ d\n  │ e\n  │ f\n  │ no such file: deps.lock\n",
			},
			not: []string{"fetching dependency 10", "  │ b\n"},
		},
		{
			name:  "started with the turn, ok",
			after: []step{{pool.EventSetupStarted, started}, {pool.EventSetupEnded, ok}},
			want:  []string{"waiting for the worktree's setup: sh -c 'make deps'…", "setup ok in 8s\n"},
		},
		{
			name:   "ended before the prompt",
			before: []step{{pool.EventSetupStarted, started}, {pool.EventSetupEnded, ok}},
			not:    []string{"waiting for the worktree's setup", "setup ok"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCLIEnv(t)
			add := func(s step) {
				e.log.Append(backends.Event{Session: "s1", Type: s.typ, Data: backends.MustJSON(s.data)})
			}
			for _, s := range tc.before {
				add(s)
			}
			start := e.fp.StartPromptFunc
			e.fp.StartPromptFunc = func(ctx context.Context, r pool.PromptRequest) (pool.Turn, error) {
				for _, s := range tc.after {
					add(s)
				}
				return start(ctx, r)
			}
			go func() { <-e.pending; _ = e.api.Answer(t.Context(), "s1", "r1", "allow_once") }()
			out, errOut, err := e.run(t, t.Context(), false, false, "", "prompt", "s1", "go")
			if err != nil {
				t.Fatalf("prompt error = %v; stderr %s", err, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("prompt stderr = %q; want it to contain %q", errOut, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(errOut, n) {
					t.Errorf("prompt stderr = %q; want no %q", errOut, n)
				}
			}
			if strings.Contains(out, "setup") {
				t.Errorf("prompt stdout = %q; want the setup on the notes only", out)
			}
		})
	}
}
