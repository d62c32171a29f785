package wiring

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/agentpool/agentpool/worktree"
)

// SpareGit is pool.SpareGit over the worktree manager and git.
type SpareGit struct{ M *worktree.Manager }

// Head is the commit repo's HEAD names now.
func (g SpareGit) Head(ctx context.Context, repo string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("head of %s: %w", repo, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// SetupState is "none" without a setup file, else its hash and whether
// it is trusted.
func (g SpareGit) SetupState(ctx context.Context, repo string) (string, error) {
	sf, err := g.M.SetupFileOf(ctx, repo)
	if errors.Is(err, worktree.ErrNoSetupFile) {
		return "none", nil
	}
	if err != nil {
		return "", fmt.Errorf("setup file of %s: %w", repo, err)
	}
	return fmt.Sprintf("%s trusted=%t", sf.SHA256, sf.Trusted), nil
}
