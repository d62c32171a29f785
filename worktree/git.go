package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// gitWaitDelay bounds how long a git command may keep its pipes open after
// it was killed or exited.
const gitWaitDelay = 5 * time.Second

// minGitMajor and minGitMinor are the oldest git the Manager accepts
// (worktree list -z, rev-parse --path-format).
const (
	minGitMajor = 2
	minGitMinor = 36
)

// call is one git invocation.
type call struct {
	at     wtLoc     // where git runs; zero for nowhere in particular
	args   []string  // git arguments after the global options
	env    []string  // extra environment, overriding the Manager's
	stdin  io.Reader // nil for none
	stdout io.Writer // nil: captured and returned
	// user runs the user's own git in their repository: their hooks and
	// configuration, without the Manager's -c overrides and identity.
	// Only for a location in the main checkout (never a session worktree).
	user bool
}

// run executes c and returns its captured stdout. A failure is a *GitError.
func (m *Manager) run(ctx context.Context, c call) ([]byte, error) {
	global, env := m.globalArgs, m.env
	if c.user {
		global, env = nil, m.userEnv
	}
	args := make([]string, 0, len(global)+2+len(c.args))
	args = append(args, global...)
	if c.at.dir != "" {
		args = append(args, "-C", c.at.dir)
	}
	args = append(args, c.args...)
	cmd := exec.CommandContext(ctx, m.gitPath, args...)
	cmd.Env = env
	if pin := c.at.env(); len(c.env) > 0 || len(pin) > 0 {
		cmd.Env = append(append(append([]string(nil), env...), pin...), c.env...)
	}
	cmd.Stdin = c.stdin
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	if c.stdout != nil {
		cmd.Stdout = c.stdout
	}
	cmd.Stderr = &errb
	cmd.WaitDelay = gitWaitDelay
	start := time.Now()
	m.gitRuns.Add(1)
	err := cmd.Run()
	m.log.Debug("git", keyArgs, c.args, keyDir, c.at.dir, keyElapsed, time.Since(start), keyErr, err)
	if err == nil {
		return out.Bytes(), nil
	}
	ge := &GitError{Args: c.args, Dir: c.at.dir, ExitCode: -1, Stderr: trimStderr(errb.Bytes()), Err: err}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ge.ExitCode = ee.ExitCode()
	}
	if ctx.Err() != nil {
		ge.Err = context.Cause(ctx)
		ge.ExitCode = -1
	}
	return out.Bytes(), ge
}

// git runs git at l and returns stdout without its trailing newline.
func (m *Manager) git(ctx context.Context, l wtLoc, args ...string) (string, error) {
	out, err := m.run(ctx, call{at: l, args: args})
	return strings.TrimSuffix(string(out), "\n"), err
}

// exitCode reports the exit status of a *GitError, or -1.
func exitCode(err error) int {
	var ge *GitError
	if errors.As(err, &ge) {
		return ge.ExitCode
	}
	return -1
}

// resolve looks each name up with one cat-file --batch-check and returns
// their object ids in order, "" for a name that does not resolve. Names must
// not contain line breaks (see validRev).
func (m *Manager) resolve(ctx context.Context, l wtLoc, names ...string) ([]string, error) {
	var in strings.Builder
	for _, n := range names {
		in.WriteString(n)
		in.WriteByte('\n')
	}
	out, err := m.run(ctx, call{at: l, args: []string{"cat-file", "--batch-check=%(objectname)"}, stdin: strings.NewReader(in.String())})
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(names) {
		return nil, fmt.Errorf("cat-file answered %d lines for %d names", len(lines), len(names))
	}
	ids := make([]string, len(names))
	for i, l := range lines {
		if l == names[i]+" missing" || l == names[i]+" ambiguous" || strings.ContainsRune(l, ' ') {
			continue
		}
		ids[i] = l
	}
	return ids, nil
}

// validRev rejects a revision that could be taken for an option or break
// the line protocol of cat-file.
func validRev(rev string) error {
	if rev == "" || strings.HasPrefix(rev, "-") || strings.ContainsAny(rev, "\x00\n\r") {
		return fmt.Errorf("%w: %q", ErrUnknownRef, rev)
	}
	return nil
}

// isAncestor reports whether commit a is an ancestor of (or equal to) b.
func (m *Manager) isAncestor(ctx context.Context, l wtLoc, a, b string) (bool, error) {
	_, err := m.git(ctx, l, "merge-base", "--is-ancestor", a, b)
	switch {
	case err == nil:
		return true, nil
	case exitCode(err) == 1:
		return false, nil
	default:
		return false, err
	}
}

// gitWorktree is one record of `git worktree list --porcelain -z`.
type gitWorktree struct {
	Path     string
	Head     string
	Branch   string // full ref name; empty when detached
	Bare     bool
	Detached bool
	Locked   bool
	Prunable bool
}

// list returns the worktrees of the repository dir belongs to, the main
// worktree first.
func (m *Manager) list(ctx context.Context, dir string) ([]gitWorktree, error) {
	out, err := m.run(ctx, call{at: at(dir), args: []string{"worktree", "list", "--porcelain", "-z"}})
	if err != nil {
		return nil, err
	}
	return parseWorktreeList(out), nil
}

// parseWorktreeList parses the -z porcelain format: NUL-terminated lines,
// records separated by an empty line.
func parseWorktreeList(out []byte) []gitWorktree {
	var all []gitWorktree
	var cur *gitWorktree
	for _, line := range strings.Split(string(out), "\x00") {
		if line == "" {
			cur = nil
			continue
		}
		key, val, _ := strings.Cut(line, " ")
		if key == "worktree" {
			all = append(all, gitWorktree{Path: val})
			cur = &all[len(all)-1]
			continue
		}
		if cur == nil {
			continue
		}
		switch key {
		case "HEAD":
			cur.Head = val
		case "branch":
			cur.Branch = val
		case "bare":
			cur.Bare = true
		case "detached":
			cur.Detached = true
		case "locked":
			cur.Locked = true
		case "prunable":
			cur.Prunable = true
		}
	}
	return all
}

// checkVersion fails for a git older than minGitMajor.minGitMinor.
func (m *Manager) checkVersion(ctx context.Context) error {
	out, err := m.git(ctx, wtLoc{}, "version")
	if err != nil {
		return err
	}
	fields := strings.Fields(out) // git version 2.39.5 (Apple Git-143)
	if len(fields) < 3 {
		return fmt.Errorf("unexpected git version output %q", out)
	}
	parts := strings.SplitN(fields[2], ".", 3)
	if len(parts) < 2 {
		return fmt.Errorf("unexpected git version %q", fields[2])
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("unexpected git version %q", fields[2])
	}
	if major < minGitMajor || major == minGitMajor && minor < minGitMinor {
		return fmt.Errorf("git %s is too old: agentpool needs %d.%d or newer", fields[2], minGitMajor, minGitMinor)
	}
	return nil
}

// repoLocalEnv reports whether an environment variable would point git at a
// different repository, index or configuration than the one we name, or
// would override the identity we set. Such variables are dropped from the
// daemon's environment (it may itself run from inside a git hook).
func repoLocalEnv(key string) bool {
	switch key {
	case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR",
		"GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
		"GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE", "GIT_NO_REPLACE_OBJECTS",
		"GIT_REPLACE_REF_BASE", "GIT_PREFIX", "GIT_SHALLOW_FILE", "GIT_NAMESPACE",
		"GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM",
		"GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
		"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE",
		"GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE",
		"GIT_LITERAL_PATHSPECS", "GIT_GLOB_PATHSPECS", "GIT_NOGLOB_PATHSPECS",
		"GIT_ICASE_PATHSPECS", "GIT_OPTIONAL_LOCKS", "GIT_TERMINAL_PROMPT",
		"GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "GIT_PAGER", "PAGER", "GIT_ASKPASS", "SSH_ASKPASS",
		"GIT_EXTERNAL_DIFF", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_ATTR_SOURCE":
		return true
	}
	return strings.HasPrefix(key, "GIT_CONFIG_KEY_") || strings.HasPrefix(key, "GIT_CONFIG_VALUE_")
}

// gitEnv builds the environment of every git call from the daemon's.
func gitEnv(base []string, name, email string) []string {
	env := make([]string, 0, len(base)+12)
	for _, kv := range base {
		key, _, _ := strings.Cut(kv, "=")
		if repoLocalEnv(key) || key == "LC_ALL" {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_OPTIONAL_LOCKS=0",
		"GIT_LITERAL_PATHSPECS=1",
		"GIT_EDITOR=true",
		"GIT_SEQUENCE_EDITOR=true",
		"GIT_PAGER=cat",
		"PAGER=cat",
		"LC_ALL=C",
		"GIT_AUTHOR_NAME="+name,
		"GIT_AUTHOR_EMAIL="+email,
		"GIT_COMMITTER_NAME="+name,
		"GIT_COMMITTER_EMAIL="+email,
	)
}

// userGitEnv builds the environment of the user's own git (see
// call.user) from the daemon's: nothing that points git at another
// repository or overrides the user's identity, no terminal prompt.
func userGitEnv(base []string) []string {
	env := make([]string, 0, len(base)+1)
	for _, kv := range base {
		key, _, _ := strings.Cut(kv, "=")
		if repoLocalEnv(key) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GIT_TERMINAL_PROMPT=0")
}

// gitGlobalArgs are the -c options of every call, which override any
// configuration file: hooks off (an empty directory), no signing, no
// fsmonitor program, no pager or editor, no automatic gc.
func gitGlobalArgs(hooksDir string) []string {
	return []string{
		"-c", "core.hooksPath=" + hooksDir,
		"-c", "core.pager=cat",
		"-c", "core.editor=true",
		"-c", "sequence.editor=true",
		"-c", "gpg.program=false",
		"-c", "commit.gpgSign=false",
		"-c", "tag.gpgSign=false",
		"-c", "core.fsmonitor=false",
		"-c", "gc.auto=0",
		"-c", "maintenance.auto=false",
		"-c", "core.quotePath=false",
	}
}
