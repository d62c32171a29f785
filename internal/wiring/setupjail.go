package wiring

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/egress"
	"github.com/agentpool/agentpool/worktree"
)

// setupJailLeaf names a setup command's jail under its session's cgroup.
// Provider ids start with a letter or digit, so no agent's jail is named
// so.
const setupJailLeaf = "_setup"

// setupTmpSuffix makes a setup command's TMPDIR its own, not the one its
// session's agents share.
const setupTmpSuffix = ".setup"

// SetupJails confines repositories' trusted setup commands: each runs in
// a cgroup of its own (<session>/_setup; the subreaper fallback where no
// cgroup can be made) under a fixed Landlock policy: it may read the
// system, the directories of PATH, git's configuration and the
// repository's git directory; write its worktree, the worktree's git
// admin directory, object store and branch ref (as an agent may, so that
// git works in the worktree), a private TMPDIR and the common package
// caches that exist; use the network. Never the daemon's home, the user's
// secrets, or the main checkout's files. Where the worktree has a private
// git view, the setup's jail gets it as an agent's does: its git writes
// land in the view, and the Manager imports them verified.
type SetupJails struct {
	// Sandbox owns the cgroup tree; nil runs setups unconfined.
	Sandbox *sandbox.Manager
	// TmpRoot is where the private TMPDIRs are made.
	TmpRoot string
	// Home is the user's home directory.
	Home string
	// Protect lists paths never granted: the daemon's home.
	Protect []string
	// Egress is a setup's way out of its network namespace (nil: none).
	Egress *Egress
}

var _ worktree.SetupSandbox = SetupJails{}

// Confine puts cmd in a new jail with the setup policy.
func (s SetupJails) Confine(_ context.Context, job worktree.SetupJob, cmd *exec.Cmd) (worktree.SetupConfinement, func(), error) {
	if s.Sandbox == nil {
		return worktree.SetupConfinement{Warning: "unconfined: the daemon has no sandbox"}, func() {}, nil
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	exe := cmd.Path
	if !filepath.IsAbs(exe) {
		// A program named relative to the worktree ("./setup.sh"): never
		// resolved against the daemon's own directory.
		exe = filepath.Join(cmd.Dir, exe)
	}
	pol, dropped := sandbox.BuildPolicy(sandbox.PolicyInput{
		Sandbox: backends.SandboxSpec{Enabled: true, Network: backends.NetworkAll,
			Read: existing(gitConfigPaths(s.Home, env)), Write: existing(cachePaths(s.Home, env))},
		Worktree: job.Worktree.Path, Exe: exe, PATH: envPATH(env), Home: s.Home,
		Git:     sandboxGitPaths(job.Git),
		Protect: append(append([]string{}, s.Protect...), job.Repo),
	})
	cfg := sandbox.JailConfig{Path: []string{job.Worktree.Session, setupJailLeaf}, Policy: &pol,
		Session: job.Worktree.Session + setupTmpSuffix, TmpRoot: s.TmpRoot}
	if s.Egress != nil && pol.View != nil && s.Sandbox.Status().Namespaces {
		// Every public and private address, through the proxy: a
		// trusted setup fetches packages, from a private registry too,
		// but reaches no service of this machine's (loopback), no
		// link-local address (the cloud's metadata) and not the daemon.
		ev, closeEgress, err := s.Egress.open(backends.SandboxSpec{Network: backends.NetworkAll, Hosts: setupPrivateRanges},
			egress.Meta{Session: job.Worktree.Session, Provider: setupJailLeaf}, nil)
		if err != nil {
			return worktree.SetupConfinement{}, nil, err
		}
		cfg.Egress, cfg.Released = ev, closeEgress
	}
	j, err := s.Sandbox.NewJail(cfg)
	if err != nil {
		if cfg.Released != nil {
			cfg.Released()
		}
		return worktree.SetupConfinement{}, nil, err
	}
	if err := j.Prepare(cmd); err != nil {
		_ = j.Release()
		return worktree.SetupConfinement{}, nil, err
	}
	d := j.Describe()
	c := worktree.SetupConfinement{Containment: d.Containment, Cgroup: d.Cgroup, Landlock: d.Landlock, Network: d.Network, Warning: d.Warning}
	if len(dropped) > 0 {
		msg := "not granted (they would expose the daemon's home, a secret or the main checkout): " + strings.Join(dropped, ", ")
		if c.Warning != "" {
			msg = c.Warning + "; " + msg
		}
		c.Warning = msg
	}
	return c, func() { _ = j.Release() }, nil
}

// setupPrivateRanges are the private address ranges a trusted setup may
// reach besides every public address (a company's package registry).
var setupPrivateRanges = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"}

// gitConfigPaths are git's user configuration files, which a setup reads.
func gitConfigPaths(home string, env []string) []string {
	var out []string
	if home != "" {
		out = append(out, filepath.Join(home, ".gitconfig"), filepath.Join(home, ".config", "git"))
	}
	if x := lookupEnv(env, "XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		out = append(out, filepath.Join(x, "git"))
	}
	if x := lookupEnv(env, "GIT_CONFIG_GLOBAL"); filepath.IsAbs(x) {
		out = append(out, x)
	}
	return out
}

// homeCaches are the package managers' caches under the user's home that
// a setup (npm ci, go mod download, cargo fetch ...) may fill.
var homeCaches = []string{
	".cache", ".npm", ".yarn", ".pnpm-store", ".local/share/pnpm", ".bun/install/cache",
	".cargo/registry", ".cargo/git", "go/pkg/mod", ".m2/repository", ".gradle/caches", ".gradle/wrapper",
}

// cachePaths are the common caches, from the home and from the variables
// that move them.
func cachePaths(home string, env []string) []string {
	var out []string
	if home != "" {
		for _, c := range homeCaches {
			out = append(out, filepath.Join(home, c))
		}
	}
	for _, k := range []string{"XDG_CACHE_HOME", "GOMODCACHE", "GOCACHE", "npm_config_cache"} {
		if v := lookupEnv(env, k); filepath.IsAbs(v) {
			out = append(out, v)
		}
	}
	if v := lookupEnv(env, "CARGO_HOME"); filepath.IsAbs(v) {
		out = append(out, filepath.Join(v, "registry"), filepath.Join(v, "git"))
	}
	return out
}

// existing keeps the paths that exist.
func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// lookupEnv returns the last value of name in env.
func lookupEnv(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := cutEnv(env[i], name); ok {
			return v
		}
	}
	return ""
}
