package acpfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// helperEnv makes the test binary run a helper instead of the tests.
const helperEnv = "ACPFS_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "orphan" {
		orphanHelper()
		return
	}
	goleak.VerifyTestMain(m)
}

// orphanHelper plays a daemon that starts a terminal, prints its pid, and
// then waits to be killed.
func orphanHelper() {
	terms, err := NewTerminals(TerminalsConfig{
		Root: os.Getenv("ACPFS_TEST_ROOT"),
		OnEvent: func(ev TerminalEvent) {
			if ev.Type == EventTerminalCreated {
				fmt.Println(ev.PID)
			}
		},
	})
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	if _, err := terms.Create(context.Background(), TerminalRequest{Command: "sleep", Args: []string{"300"}}); err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	select {}
}

// canary is the content of the file outside the worktree that no accepted
// path may ever read or change.
const canary = "CANARY: outside the worktree\n"

// tree is a worktree with a sibling "<root>-evil" and an outside directory,
// laid out by makeTree.
type tree struct {
	base    string // holds root, root-evil and outside
	root    string
	outside string
}

// makeTree builds, in a fresh temp dir:
//
//	outside/canary.txt
//	wt-evil/secret.txt
//	wt/a.txt, wt/dir/b.txt, wt/.git/HEAD, wt/sub/.git (file)
//	wt/link-in -> a.txt            wt/link-abs-in -> <root>/a.txt
//	wt/link-out-file -> <outside>/canary.txt
//	wt/link-out-rel -> ../outside/canary.txt
//	wt/link-out-dir -> <outside>   wt/link-evil -> ../wt-evil
//	wt/loop1 -> loop2 -> loop1     wt/self -> self
//	wt/dir/up -> ..                wt/dir/upup -> ../..
//	wt/gitlink -> .git             wt/tricky -> nope/../link-out-dir
//	wt/dangling -> missing.txt
func makeTree(tb testing.TB) tree {
	tb.Helper()
	base, err := filepath.EvalSymlinks(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tr := tree{base: base, root: filepath.Join(base, "wt"), outside: filepath.Join(base, "outside")}
	files := map[string]string{
		"outside/canary.txt": canary,
		"wt-evil/secret.txt": canary,
		"wt/a.txt":           "alpha\n",
		"wt/dir/b.txt":       "beta\n",
		"wt/.git/HEAD":       "ref: refs/heads/main\n",
		"wt/sub/.git":        "gitdir: ../.git/modules/sub\n",
	}
	for name, content := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	links := [][2]string{
		{"wt/link-in", "a.txt"},
		{"wt/link-abs-in", filepath.Join(tr.root, "a.txt")},
		{"wt/link-out-file", filepath.Join(tr.outside, "canary.txt")},
		{"wt/link-out-rel", "../outside/canary.txt"},
		{"wt/link-out-dir", tr.outside},
		{"wt/link-evil", "../wt-evil"},
		{"wt/loop1", "loop2"},
		{"wt/loop2", "loop1"},
		{"wt/self", "self"},
		{"wt/dir/up", ".."},
		{"wt/dir/upup", "../.."},
		{"wt/gitlink", ".git"},
		{"wt/tricky", "nope/../link-out-dir"},
		{"wt/dangling", "missing.txt"},
	}
	for _, l := range links {
		if err := os.Symlink(l[1], filepath.Join(base, l[0])); err != nil {
			tb.Fatal(err)
		}
	}
	return tr
}

// checkOutside fails tb if the outside directories changed: the canary
// files must be the only entries and keep their content.
func (tr tree) checkOutside(tb testing.TB) {
	tb.Helper()
	for _, dir := range []string{tr.outside, tr.root + "-evil"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			tb.Fatal(err)
		}
		if len(entries) != 1 {
			names := make([]string, 0, len(entries))
			for _, e := range entries {
				names = append(names, e.Name())
			}
			tb.Errorf("outside dir %s holds %v; want only the canary", dir, names)
		}
		if len(entries) == 0 {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, entries[0].Name()))
		if err != nil || string(data) != canary {
			tb.Errorf("canary in %s = %q, %v; want %q", dir, data, err, canary)
		}
	}
}
