package wiring

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/egress"
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
	// Secrets are files of the daemon's secrets given by path (the
	// cluster key, the TLS key, the store's password file): no grant may
	// expose them either.
	Secrets []string
	// Egress is the agents' way out of their network namespaces (nil:
	// none, they reach nothing but their own loopback).
	Egress *Egress
	// Git locates a worktree's repository for the policy (nil: the agent
	// cannot commit on its branch, as it gets no write access to .git).
	Git func(ctx context.Context, wt pool.Worktree) (sandbox.GitPaths, error)
}

// gitLookupTimeout bounds the repository lookup of one launch.
const gitLookupTimeout = 10 * time.Second

// What the protected paths of a launch are, in the reasons of refusals.
const (
	whatDaemonHome   = "the daemon's home"
	whatMainCheckout = "the main checkout"
	whatDaemonSecret = "a secret of the daemon's"
)

// policy builds the Landlock policy of a launch, nil when the provider's
// sandbox is disabled, with what it refused and why.
func (c Confiner) policy(req pool.LaunchRequest) (*sandbox.PolicyResult, error) {
	sb := req.Spec.Sandbox
	if !sb.Enabled {
		return nil, nil
	}
	var git sandbox.GitPaths
	if c.Git != nil && req.Worktree.Repo != "" {
		ctx, cancel := context.WithTimeout(context.Background(), gitLookupTimeout)
		var err error
		git, err = c.Git(ctx, req.Worktree)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("locate the repository of %s: %w", req.Worktree.Path, err)
		}
	}
	in := c.policyInput(req.Spec)
	in.Worktree, in.Git = req.Spec.Dir, git
	if repo := worktree.LocalPath(req.Worktree.Repo); repo != "" {
		// The user's main checkout (or the shared repository of a session
		// given by URL): its files are not the agent's.
		in.Protected = append(in.Protected, sandbox.Protected{Path: repo, What: whatMainCheckout})
	}
	r := sandbox.PolicyFor(in)
	if err := makeStateDirs(sb, r.Policy, c.Home); err != nil {
		return nil, err
	}
	return &r, nil
}

// makeStateDirs makes the directories of sb.MakeDirs that p lets the
// agent write and that are missing (mode 0700, with their parents): an
// agent started for the first time under the sandbox cannot make its
// state directory itself, the rest of the home being absent or read-only
// in its view, and a grant of a missing path is skipped. A path that
// exists in any form, a dangling symlink included, is left as it is. Only
// a directory under home, or under a directory the daemon's user owns
// that is not a system directory, is made: the error for another names
// the "sandbox.write" entry, as does one for a directory that cannot be
// made.
func makeStateDirs(sb backends.SandboxSpec, p sandbox.Policy, home string) error {
	var errs []error
	for _, d := range sb.MakeDirs {
		if !slices.Contains(p.Write, d) {
			continue
		}
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if why := mayMakeDir(d, home); why != "" {
			errs = append(errs, fmt.Errorf("%s %q does not exist, and the daemon makes only directories under your home or under a directory you own: %s; make it yourself, or remove it from %s in providers.json",
				backends.EntryWrite, d, why, backends.EntryWrite))
			continue
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: make the directory: %w", backends.EntryWrite, d, err))
		}
	}
	return errors.Join(errs...)
}

// mayMakeDir returns why the daemon may not make the missing directory
// d, "" when it may: d lies in home, or its nearest existing ancestor is
// a directory the daemon's user owns, neither the root nor a directory at
// its top (/var, /srv) nor one of the system directories.
func mayMakeDir(d, home string) string {
	if home != "" && isWithinDir(d, home) {
		return ""
	}
	a := filepath.Dir(d)
	for {
		if _, err := os.Lstat(a); err == nil || a == "/" {
			break
		}
		a = filepath.Dir(a)
	}
	fi, err := os.Stat(a)
	switch {
	case err != nil:
		return err.Error()
	case a == "/" || filepath.Dir(a) == "/" || sandbox.SystemReadable(a) != "":
		return a + " is a system directory"
	case !fi.IsDir():
		return a + " is not a directory"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
		return fmt.Sprintf("%s is not owned by the daemon's user (uid %d)", a, os.Getuid())
	}
	return ""
}

// isWithinDir reports whether path is dir or lies beneath it.
func isWithinDir(path, dir string) bool {
	path, dir = filepath.Clean(path), filepath.Clean(dir)
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// policyInput is what a launch of spec shares with every other: the
// program, its arguments and PATH, the paths its environment names
// (GOOGLE_APPLICATION_CREDENTIALS, CODEX_HOME, ...), the home, the
// daemon's home.
func (c Confiner) policyInput(spec backends.Spec) sandbox.PolicyInput {
	env := backends.AgentEnv(spec)
	in := sandbox.PolicyInput{Sandbox: spec.Sandbox, Exe: spec.Path, Args: spec.Args, PATH: envPATH(spec.Env), Home: c.Home,
		Env: backends.EnvPaths(env), GitConfig: agentGitConfig(c.Home, env)}
	for _, p := range c.Protect {
		in.Protected = append(in.Protected, sandbox.Protected{Path: p, What: whatDaemonHome})
	}
	for _, p := range c.Secrets {
		in.Protected = append(in.Protected, sandbox.Protected{Path: p, What: whatDaemonSecret})
	}
	return in
}

// agentGitConfig are the files of git's per-user configuration an agent
// with environment env reads: ~/.gitconfig, and config, ignore and
// attributes in $XDG_CONFIG_HOME/git (~/.config/git by default), with
// $GIT_CONFIG_GLOBAL when set. Files, not the directory: git's credential
// store may keep the user's passwords beside them
// ($XDG_CONFIG_HOME/git/credentials).
func agentGitConfig(home string, env []string) []string {
	var out []string
	xdg := lookupEnv(env, "XDG_CONFIG_HOME")
	if !filepath.IsAbs(xdg) && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	if home != "" {
		out = append(out, filepath.Join(home, ".gitconfig"))
	}
	if filepath.IsAbs(xdg) {
		for _, f := range []string{"config", "ignore", "attributes"} {
			out = append(out, filepath.Join(xdg, "git", f))
		}
	}
	if g := lookupEnv(env, "GIT_CONFIG_GLOBAL"); filepath.IsAbs(g) {
		out = append(out, g)
	}
	return out
}

// ConfigNotes returns the refusals of spec's sandbox that do not depend on
// a session: grants of the home, a secret or the daemon's home, and a
// script the command names inside one. A session's launch adds those
// that depend on its repository (the main checkout).
func (c Confiner) ConfigNotes(spec backends.Spec) []backends.SandboxNote {
	if c.Sandbox == nil || !spec.Sandbox.Enabled || spec.Path == "" {
		return nil
	}
	in := c.policyInput(spec)
	// "$WORKTREE" entries are the session's worktree: always granted.
	sb := in.Sandbox
	sb.Read = slices.DeleteFunc(slices.Clone(sb.Read), isWorktreePath)
	sb.Write = slices.DeleteFunc(slices.Clone(sb.Write), isWorktreePath)
	in.Sandbox = sb
	return sandbox.PolicyFor(in).Notes
}

func isWorktreePath(p string) bool { return strings.HasPrefix(p, "$WORKTREE") }

// agentJail returns the jail of a launch's agent and a function that makes
// the jail of each of its terminals; nil, nil without a Sandbox.
// share, when not "", is the address of the daemon's shared MCP servers,
// which the agent must reach whatever its network (and relay, the program
// it reaches them with over stdio).
func (c Confiner) agentJail(req pool.LaunchRequest, share, relay string) (backends.Jail, func(id string) (*sandbox.Jail, error), *sandbox.PolicyResult, error) {
	if c.Sandbox == nil {
		if req.Early != nil {
			req.Early.Close()
		}
		return nil, nil, nil, nil
	}
	res, err := c.policy(req)
	if err != nil {
		if req.Early != nil {
			req.Early.Close()
		}
		return nil, nil, nil, err
	}
	var pol *sandbox.Policy
	if res != nil {
		pol = &res.Policy
		if share != "" {
			allowSharePort(pol, share)
			if relay != "" && !slices.Contains(pol.Read, relay) {
				pol.Read = append(pol.Read, relay)
			}
		}
	}
	esb := req.Spec.Sandbox
	if share != "" {
		esb = withShare(esb, share, "")
	}
	agent := req.Spec.Provider
	jc := func(leaf string) sandbox.JailConfig {
		return sandbox.JailConfig{Path: []string{req.Session, agent, leaf}, Policy: pol, Session: req.Session, TmpRoot: c.TmpRoot}
	}
	cfg := jc("agent")
	early := takeEarly(req, c.Sandbox)
	if c.viewed(pol) {
		ev, closeEgress, err := c.Egress.open(esb, egress.Meta{Session: req.Session, Provider: agent}, req.Emit)
		if err != nil {
			if early != nil {
				_ = early.Release()
			}
			return nil, nil, nil, err
		}
		cfg.Egress, cfg.Released = ev, closeEgress
	}
	var j *sandbox.Jail
	if early != nil {
		// Made by LaunchEarly at cfg's path, for cfg's session.
		j = early
		if err := j.Configure(cfg.Policy, cfg.Egress, cfg.Released); err != nil {
			_ = j.Release()
			return nil, nil, nil, err
		}
	} else if j, err = c.Sandbox.NewJail(cfg); err != nil {
		if cfg.Released != nil {
			cfg.Released()
		}
		return nil, nil, nil, err
	}
	// A terminal joins its agent's namespaces: the agent reaches what the
	// terminal serves, and they share one /tmp.
	terms := func(id string) (*sandbox.Jail, error) {
		cfg := jc(id)
		cfg.Join = j
		return c.Sandbox.NewJail(cfg)
	}
	return j, terms, res, nil
}

// earlyJail is the jail LaunchEarly made and started a launcher in.
type earlyJail struct {
	j *sandbox.Jail
	m *sandbox.Manager
}

// Close releases the jail, which ends its waiting launcher.
func (e earlyJail) Close() { _ = e.j.Release() }

// launchEarly makes the jail of (session, spec's agent) and starts its
// launcher, to wait there for the program (sandbox.Jail.StartEarly),
// where the launch will run in namespaces of its own.
func (c Confiner) launchEarly(spec backends.Spec, session string) (pool.Early, bool) {
	if c.Sandbox == nil || !spec.Sandbox.Enabled || !c.Sandbox.Status().Namespaces {
		return nil, false
	}
	j, err := c.Sandbox.NewJail(sandbox.JailConfig{Path: []string{session, spec.Provider, "agent"}, Session: session, TmpRoot: c.TmpRoot})
	if err != nil {
		return nil, false
	}
	if err := j.StartEarly(sandbox.AgentNice); err != nil {
		_ = j.Release()
		return nil, false
	}
	return earlyJail{j: j, m: c.Sandbox}, true
}

// takeEarly returns the jail of req.Early when it is one of m's and the
// launch is an ACP agent's (whose start hands the program to the waiting
// launcher: a terminal program's starts anew, and would leave it waiting
// in the agent's cgroup), and releases any other.
func takeEarly(req pool.LaunchRequest, m *sandbox.Manager) *sandbox.Jail {
	if req.Early == nil {
		return nil
	}
	if e, ok := req.Early.(earlyJail); ok && e.m == m && req.Spec.Kind == backends.KindACP {
		return e.j
	}
	req.Early.Close()
	return nil
}

// viewed reports whether a launch under pol runs in namespaces of its
// own, and so needs the egress proxy to reach out.
func (c Confiner) viewed(pol *sandbox.Policy) bool {
	return c.Egress != nil && pol != nil && pol.View != nil && c.Sandbox.Status().Namespaces
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
// Confiner.Git: the worktree's git directories, and its private git view
// when it has one.
func GitPathsOf(m *worktree.Manager) func(ctx context.Context, wt pool.Worktree) (sandbox.GitPaths, error) {
	return func(ctx context.Context, wt pool.Worktree) (sandbox.GitPaths, error) {
		p, err := m.GitPaths(ctx, toWT(wt))
		if err != nil {
			return sandbox.GitPaths{}, err
		}
		return sandboxGitPaths(p), nil
	}
}

// sandboxGitPaths is p as the sandbox takes it.
func sandboxGitPaths(p worktree.GitPaths) sandbox.GitPaths {
	out := sandbox.GitPaths{CommonDir: p.CommonDir, AdminDir: p.AdminDir, Branch: p.Branch}
	if v := p.View; v.Set() {
		out.View = sandbox.GitView{ObjectsUpper: v.ObjectsUpper, ObjectsWork: v.ObjectsWork, Refs: v.Refs, Logs: v.Logs}
	}
	return out
}
