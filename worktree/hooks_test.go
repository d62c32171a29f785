package worktree

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

var plantedHooks = []string{
	"pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout",
	"reference-transaction", "post-index-change", "pre-auto-gc", "post-rewrite",
}

// plantHooks writes hooks into dir that append their name to marker.
func plantHooks(t *testing.T, dir, marker string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	for _, h := range plantedHooks {
		script := "#!/bin/sh\necho " + h + " >> '" + marker + "'\n"
		must(t, os.WriteFile(filepath.Join(dir, h), []byte(script), 0o755))
	}
}

func TestHooksNeverRun(t *testing.T) {
	tests := []struct {
		name  string
		plant func(t *testing.T, repo, marker string)
	}{
		{"in .git/hooks", func(t *testing.T, repo, marker string) {
			plantHooks(t, filepath.Join(repo, ".git", "hooks"), marker)
		}},
		{"in the repo's core.hooksPath", func(t *testing.T, repo, marker string) {
			dir := filepath.Join(t.TempDir(), "hooks")
			plantHooks(t, dir, marker)
			gitT(t, repo, "config", "core.hooksPath", dir)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			m := newManager(t)
			repo := newRepo(t, "repo", nil)
			marker := filepath.Join(t.TempDir(), "hooks-ran")
			tt.plant(t, repo, marker)
			// Control: the hooks do run for a plain git commit.
			gitT(t, repo, "commit", "-q", "--allow-empty", "-m", "control")
			if !exists(marker) {
				t.Fatalf("control commit did not run the planted hooks; the test would prove nothing")
			}
			must(t, os.Remove(marker))

			wt := create(t, m, "s", repo)
			writeFile(t, wt.Path, "a.txt", "a\n")
			c1, err := m.Checkpoint(ctx, wt)
			must(t, err)
			must(t, m.Restore(ctx, wt, wt.BaseCommit))
			must(t, m.Restore(ctx, wt, c1))
			_, err = m.Diff(ctx, wt, "", "")
			must(t, err)
			_, err = m.Remove(ctx, wt, false)
			must(t, err)
			wt2 := create(t, m, "s2", repo)
			must(t, os.RemoveAll(wt2.Path))
			_, err = m.Recreate(ctx, wt2)
			must(t, err)
			writeFile(t, wt2.Path, "b.txt", "b\n")
			_, err = m.Reconcile(ctx, nil, true) // prunes s2 as unknown, committing its work
			must(t, err)
			wt3 := create(t, m, "s3", repo)
			_, err = m.Remove(ctx, wt3, true)
			must(t, err)

			if exists(marker) {
				t.Errorf("hooks ran during the Manager's git calls: %s", readFile(t, filepath.Dir(marker), filepath.Base(marker)))
			}
		})
	}
}
