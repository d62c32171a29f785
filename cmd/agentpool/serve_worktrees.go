package main

import "path/filepath"

// worktreesRoot is the directory of the sessions' worktrees: --worktrees,
// else worktreesDir in the data directory home. Worktrees made under
// another root stay where they are: each session records its own path.
func (m *Main) worktreesRoot(home string) string {
	if m.Worktrees != "" {
		return m.Worktrees
	}
	return filepath.Join(home, worktreesDir)
}
