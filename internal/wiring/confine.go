package wiring

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/worktree"
)

// Confiner makes the jails a launch's agent and terminals start in.
type Confiner struct {
	// Sandbox owns the cgroup tree; nil launches without confinement.
	Sandbox *sandbox.Manager
	// TmpRoot is where each session's private TMPDIR is made.
	TmpRoot string
	// Home is the user's home directory (never granted as a whole).
	Home string
	// Protect lists paths no agent may reach: the daemon's home (token,
	// database, other sessions' worktrees).
	Protect []string
	// Git locates a worktree's repository for the policy (nil: the agent
	// cannot commit on its branch, as it gets no write access to .git).
	Git func(ctx context.Context, wt pool.Worktree) (sandbox.GitPaths, error)
}

// gitLookupTimeout bounds the repository lookup of one launch.
const gitLookupTimeout = 10 * time.Second

// policy builds the Landlock policy of a launch, nil when the provider's
// sandbox is disabled. dropped lists grants refused as too wide.
func (c Confiner) policy(req pool.LaunchRequest) (pol *sandbox.Policy, dropped []string, err error) {
	sb := req.Spec.Sandbox
	if !sb.Enabled {
		return nil, nil, nil
	}
	var git sandbox.GitPaths
	if c.Git != nil && req.Worktree.Repo != "" {
		ctx, cancel := context.WithTimeout(context.Background(), gitLookupTimeout)
		git, err = c.Git(ctx, req.Worktree)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("locate the repository of %s: %w", req.Worktree.Path, err)
		}
	}
	protect := append([]string{}, c.Protect...)
	if req.Worktree.Repo != "" {
		// The user's main checkout: its working files are not the agent's.
		protect = append(protect, req.Worktree.Repo)
	}
	p, dropped := sandbox.BuildPolicy(sandbox.PolicyInput{
		Sandbox: sb, Worktree: req.Spec.Dir, Exe: req.Spec.Path, PATH: envPATH(req.Spec.Env),
		Git: git, Home: c.Home, Protect: protect,
	})
	return &p, dropped, nil
}

// agentJail returns the jail of a launch's agent and a function that makes
// the jail of each of its terminals; nil, nil without a Sandbox.
func (c Confiner) agentJail(req pool.LaunchRequest) (backends.Jail, func(id string) (*sandbox.Jail, error), []string, error) {
	if c.Sandbox == nil {
		return nil, nil, nil, nil
	}
	pol, dropped, err := c.policy(req)
	if err != nil {
		return nil, nil, nil, err
	}
	agent := req.Spec.Provider
	jc := func(leaf string) sandbox.JailConfig {
		return sandbox.JailConfig{Path: []string{req.Session, agent, leaf}, Policy: pol, Session: req.Session, TmpRoot: c.TmpRoot}
	}
	j, err := c.Sandbox.NewJail(jc("agent"))
	if err != nil {
		return nil, nil, nil, err
	}
	terms := func(id string) (*sandbox.Jail, error) { return c.Sandbox.NewJail(jc(id)) }
	return j, terms, dropped, nil
}

// envPATH returns the PATH a launch's program sees: the spec's own, else
// the daemon's.
func envPATH(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := cutEnv(env[i], "PATH"); ok {
			return v
		}
	}
	return os.Getenv("PATH")
}

func cutEnv(kv, name string) (string, bool) {
	if len(kv) > len(name) && kv[:len(name)] == name && kv[len(name)] == '=' {
		return kv[len(name)+1:], true
	}
	return "", false
}

// DefaultHome is the user's home directory, "" when unknown.
func DefaultHome() string {
	h, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Clean(h)
}

// GitPathsOf adapts the worktree manager's repository lookup to
// Confiner.Git.
func GitPathsOf(m *worktree.Manager) func(ctx context.Context, wt pool.Worktree) (sandbox.GitPaths, error) {
	return func(ctx context.Context, wt pool.Worktree) (sandbox.GitPaths, error) {
		p, err := m.GitPaths(ctx, toWT(wt))
		if err != nil {
			return sandbox.GitPaths{}, err
		}
		return sandbox.GitPaths{CommonDir: p.CommonDir, AdminDir: p.AdminDir, Branch: p.Branch}, nil
	}
}
