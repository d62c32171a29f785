package worktree

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SetupUntrusted reports that a setup was skipped: the repository's setup
// file, as it is, has not been trusted (see Manager.Trust).
const SetupUntrusted = "untrusted"

// maxUntrustedContent bounds the content of the setup file carried by a
// SetupUntrusted event; SetupFileOf gives all of it.
const maxUntrustedContent = 16 << 10

// SetupSandbox confines setup commands. The Manager declares it; the
// daemon implements it with the kernel's sandbox (a cgroup of the
// command's own and Landlock rules).
type SetupSandbox interface {
	// Confine makes cmd, built and not started, run confined as the setup
	// command of job's worktree: it may change cmd's Path, Args, Env and
	// SysProcAttr (keeping what is set). It returns how the command is
	// confined and a release function that the Manager calls once cmd has
	// been waited for: it ends whatever the command left running and
	// removes the confinement. An error refuses the command.
	Confine(ctx context.Context, job SetupJob, cmd *exec.Cmd) (SetupConfinement, func(), error)
}

// SetupJob is the setup command a SetupSandbox confines.
type SetupJob struct {
	// Worktree is the worktree the command runs in (and may write).
	Worktree Worktree
	// Repo is the main checkout, which it may not write.
	Repo string
	// Git are the worktree's git directories (zero when unknown), which it
	// needs as an agent does to run git in the worktree.
	Git GitPaths
}

// SetupConfinement says how a setup command is confined; it is part of
// the SetupStarted event.
type SetupConfinement struct {
	// Containment is "cgroup" or "subreaper"; "" when unconfined.
	Containment string `json:"containment,omitempty"`
	// Cgroup is the command's own cgroup, if it has one.
	Cgroup string `json:"cgroup,omitempty"`
	// Landlock is the Landlock ABI of the rules applied (0: none).
	Landlock int `json:"landlock"`
	// Network is the network the command may use.
	Network string `json:"network,omitempty"`
	// Warning says what confinement is missing, "" when none is.
	Warning string `json:"warning,omitempty"`
}

// addUntrusted registers the skipped setup of the new worktree wt: the
// setup file sf is not trusted. RunSetup reports it, once; Trust lists the
// session as one that can now run its setup.
func (m *Manager) addUntrusted(wt Worktree, sf SetupFile) {
	r := &setupRun{setup: sf.Setup, top: sf.Repo, done: make(chan struct{}), untrusted: &sf}
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	r.finish() // nothing to wait for
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setups[filepath.Clean(wt.Path)] = r
	m.skipped[filepath.Clean(wt.Path)] = skippedSetup{session: wt.Session, repo: sf.Repo}
}

// skippedSetup is a worktree whose setup was skipped as untrusted.
type skippedSetup struct{ session, repo string }

// skippedSessions lists the sessions of repo whose setup was skipped.
func (m *Manager) skippedSessions(repo string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, s := range m.skipped {
		if s.repo == repo {
			out = append(out, s.session)
		}
	}
	return out
}

// forgetSkipped drops the worktree at path from the skipped setups.
func (m *Manager) forgetSkipped(path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.skipped, filepath.Clean(path))
}

// untrustedEvent is the SetupUntrusted event of sf.
func untrustedEvent(sf SetupFile) SetupEvent {
	content := string(sf.Content)
	truncated := false
	if len(content) > maxUntrustedContent {
		content, truncated = strings.ToValidUTF8(content[:maxUntrustedContent], ""), true
	}
	ev := SetupEvent{Kind: SetupUntrusted, File: sf.File, Repo: sf.Repo, SHA256: sf.SHA256, Content: content,
		ContentTruncated: truncated, TrustedSHA256: sf.TrustedSHA256, CopyList: sf.Setup.Copy, Command: sf.Setup.Command,
		TrustCommand: "agentpool trust " + shellQuote(sf.Repo)}
	if len(sf.Setup.Command) > 0 {
		ev.Timeout = sf.Setup.Timeout.String()
	}
	return ev
}

// PrepareSetup prepares the setup of the existing worktree wt again from
// its repository's setup file as it is now, for RunSetup: after the user
// trusted the file, a session whose setup was skipped can run it. Errors
// wrap ErrUntrusted (the file as it is now is not trusted),
// ErrNoSetupFile (none, or one that asks for nothing), ErrSetupConfig,
// ErrSetupRunning, or ErrMissing (the worktree's directory is gone).
func (m *Manager) PrepareSetup(ctx context.Context, wt Worktree) error {
	if err := ValidSession(wt.Session); err != nil {
		return err
	}
	if _, err := os.Stat(wt.Path); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMissing, wt.Path, err)
	}
	info, err := m.repo(ctx, wt.Repo)
	if err != nil {
		return err
	}
	sf, ok, err := m.setupFileFor(ctx, info, wt.BaseCommit)
	if err != nil {
		return err
	}
	if !ok || sf.Setup.Empty() {
		return fmt.Errorf("%w: %s has none that asks for anything", ErrNoSetupFile, info.name())
	}
	if !sf.Trusted {
		return fmt.Errorf("%w: %s (SHA-256 %s); trust it first: agentpool trust %s", ErrUntrusted, sf.File, sf.SHA256, shellQuote(info.name()))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.setups[filepath.Clean(wt.Path)]; r != nil && r.untrusted == nil {
		return fmt.Errorf("%w: session %q", ErrSetupRunning, wt.Session)
	}
	r := newSetupRun(info, sf.Setup)
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	m.setups[filepath.Clean(wt.Path)] = r
	delete(m.skipped, filepath.Clean(wt.Path))
	return nil
}

// confineSetup confines the setup command cmd of wt with the configured
// SetupSandbox; without one the command runs unconfined and the result
// says so.
func (m *Manager) confineSetup(ctx context.Context, wt Worktree, top string, cmd *exec.Cmd) (SetupConfinement, func(), error) {
	if m.sandbox == nil {
		return SetupConfinement{Warning: "unconfined: the daemon has no sandbox for setup commands"}, func() {}, nil
	}
	git, err := m.GitPaths(ctx, wt)
	if err != nil {
		return SetupConfinement{}, nil, fmt.Errorf("locate the worktree's git directories: %w", err)
	}
	c, release, err := m.sandbox.Confine(ctx, SetupJob{Worktree: wt, Repo: top, Git: git}, cmd)
	if err != nil {
		return SetupConfinement{}, nil, fmt.Errorf("confine: %w", err)
	}
	return c, release, nil
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:@,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
