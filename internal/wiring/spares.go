package wiring

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentpool/agentpool/worktree"
)

// headTimeout bounds the git that reads a repository's head.
const headTimeout = 10 * time.Second

// SpareGit is pool.SpareGit over the worktree manager and git.
type SpareGit struct{ M *worktree.Manager }

// Head is the commit repo's HEAD names now: read from the git
// directory's files when repo is a top level in a layout worktree.ReadHead
// is sure of (a session's create waits for it), else from git.
func (g SpareGit) Head(ctx context.Context, repo string) (string, error) {
	if commit, ok := worktree.ReadHead(repo); ok {
		return commit, nil
	}
	// Bounded: a ref an agent replaced with a FIFO would block git too.
	ctx, cancel := context.WithTimeout(ctx, headTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("head of %s: %w", repo, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// SetupState is "none" without a setup file, else its hash and whether
// it is trusted. A repo that holds its .git is its own top level, and is
// read without asking git for it.
func (g SpareGit) SetupState(ctx context.Context, repo string) (string, error) {
	var sf worktree.SetupFile
	var err error
	if _, serr := os.Lstat(filepath.Join(repo, ".git")); serr == nil && filepath.IsAbs(repo) {
		sf, err = g.M.SetupFileAt(filepath.Clean(repo))
	} else {
		sf, err = g.M.SetupFileOf(ctx, repo)
	}
	if errors.Is(err, worktree.ErrNoSetupFile) {
		return "none", nil
	}
	if err != nil {
		return "", fmt.Errorf("setup file of %s: %w", repo, err)
	}
	return fmt.Sprintf("%s trusted=%t", sf.SHA256, sf.Trusted), nil
}
