package worktree

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// CheckResult is what running a check command in a worktree gave.
type CheckResult struct {
	// ExitCode is the command's exit status, -1 if it did not exit
	// normally (killed, timed out, not started).
	ExitCode int `json:"exit_code"`
	// Output is the last lines of its output (stdout and stderr), bounded
	// like a setup command's.
	Output string `json:"output"`
	// Confinement says how it was confined.
	Confinement *SetupConfinement `json:"confinement,omitempty"`
	// Error says why it did not run to its end ("" when it did).
	Error string `json:"error,omitempty"`
}

// RunCheck runs command through /bin/sh -c in wt, whose repository's top
// level is top, confined and bounded like a trusted setup command: its
// own process group, the SetupSandbox, at most timeout, output kept in
// the last lines. The command is the caller's (a user typed it), so it
// needs no trust of the repository's files.
func (m *Manager) RunCheck(ctx context.Context, wt Worktree, top, command string, timeout time.Duration) CheckResult {
	s := Setup{File: "check", Command: []string{"/bin/sh", "-c", command}, Timeout: timeout}
	var conf *SetupConfinement
	code, tail, dropped, err := m.runSetupCommand(ctx, wt, &setupRun{top: top}, s, func(ev SetupEvent) {
		if ev.Kind == SetupStarted {
			conf = ev.Confinement
		}
	})
	res := CheckResult{ExitCode: code, Output: strings.Join(tail, "\n"), Confinement: conf}
	if dropped > 0 {
		res.Output = fmt.Sprintf("(%d bytes of output not kept)\n%s", dropped, res.Output)
	}
	if err != nil && code < 0 {
		res.Error = err.Error()
	}
	return res
}

// ResolveBase resolves base ("" for HEAD) in the repository at repo to a
// commit id, and names the local branch that work started there merges
// into: base itself when it is a local branch, the branch checked out at
// repo when base is "" , else "".
func (m *Manager) ResolveBase(ctx context.Context, repo, base string) (commit, branch string, err error) {
	rev := base
	if rev == "" {
		rev = "HEAD"
	}
	if strings.HasPrefix(rev, "-") || strings.ContainsAny(rev, "\n\x00") {
		return "", "", fmt.Errorf("base %q: %w", base, ErrUnknownRef)
	}
	commit, err = m.git(ctx, at(repo), "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil || commit == "" {
		return "", "", fmt.Errorf("base %q is not a commit of %s: %w", base, repo, ErrUnknownRef)
	}
	if base == "" {
		b, err := m.git(ctx, at(repo), "symbolic-ref", "--quiet", "--short", "HEAD")
		if err == nil {
			branch = b
		}
		return commit, branch, nil
	}
	if _, err := m.git(ctx, at(repo), "show-ref", "--verify", "--quiet", "refs/heads/"+base); err == nil {
		branch = base
	}
	return commit, branch, nil
}
