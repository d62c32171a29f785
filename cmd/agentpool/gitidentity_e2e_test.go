package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// TestEndToEndAgentGitIdentity: a confined agent gets the user's git
// identity in its environment, from the user's global configuration it
// cannot read itself, or the daemon's default when the user has none; so
// `git config --get user.name` finds one (a tool such as aider would
// otherwise write it into .git/config, which confinement keeps read-only)
// and its commits carry it.
func TestEndToEndAgentGitIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	probe := []agenttest.Step{
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c",
			`printf '%s|%s' "$(git config --get user.name)" "$(git config --get user.email)"`}}),
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c",
			`git commit -q --allow-empty -m mine && git log -1 --format='%an <%ae>|%cn'`}}),
		// A provider's own GIT_CONFIG_* entries are kept, and ours follow.
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", `git config --get core.quotepath`}}),
	}
	for _, tc := range []struct {
		name, global, want, commit string
	}{
		{"global", "[user]\n\tname = Jane Global\n\temail = jane@example.com\n", "Jane Global|jane@example.com", "Jane Global <jane@example.com>|Jane Global"},
		{"none", "", "agentpool|agentpool@localhost", "agentpool <agentpool@localhost>|agentpool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newConfineFixture(t)
			global := filepath.Join(f.fakeHome, "gitconfig")
			if err := os.WriteFile(global, []byte(tc.global), 0o600); err != nil {
				t.Fatal(err)
			}
			// The daemon reads the user's global file; the agent is pointed
			// at an empty one, as if it could not reach the user's.
			t.Setenv("GIT_CONFIG_GLOBAL", global)
			t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
			for _, k := range []string{"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL", "GIT_CONFIG_COUNT"} {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			script, err := json.Marshal(agenttest.Script{Turns: []agenttest.Turn{{Steps: probe}}})
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(script),
				"GIT_CONFIG_GLOBAL": os.DevNull, "GORACE": "atexit_sleep_ms=0",
				"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.quotepath", "GIT_CONFIG_VALUE_0": "false"}
			doc := map[string]any{"version": 1, "providers": map[string]any{
				"hostile": map[string]any{"extends": "acp", "command": []string{f.exe}, "env": env},
			}}
			b, _ := json.Marshal(doc)
			if err := os.WriteFile(filepath.Join(f.home, providersFile), b, 0o600); err != nil {
				t.Fatal(err)
			}
			d := f.start(t)
			waitProviderReady(t, d, "hostile")
			id, _ := f.session(t, d)
			got := results(t, d, id)
			if len(got) != 3 {
				t.Fatalf("%d sys results %v; want 3\ndaemon log:\n%s", len(got), got, d.out)
			}
			for i, want := range []string{"exit=0 " + tc.want, "exit=0 " + tc.commit + "\n", "exit=0 false\n"} {
				if got[i].Status != "ok" || got[i].Detail != want {
					t.Errorf("step %d: %s %q; want ok %q", i, got[i].Status, got[i].Detail, want)
				}
			}
			if cfg, err := os.ReadFile(filepath.Join(f.repo, ".git", "config")); err != nil || strings.Contains(string(cfg), "[user]") {
				t.Errorf("the repository's config gained a user section (%v):\n%s", err, cfg)
			}
		})
	}
}
