package worktree

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Errors returned by the Manager; test for them with errors.Is. The message
// of the wrapping error names the repository, session or ref concerned.
var (
	// ErrNotRepository is returned when the repository path does not exist
	// or is not inside a git working tree.
	ErrNotRepository = errors.New("not a git repository")
	// ErrBareRepository is returned for a bare repository, which has no
	// working tree to branch worktrees from.
	ErrBareRepository = errors.New("bare git repository")
	// ErrUnknownRef is returned when a base ref, checkpoint or diff end does
	// not name an object of the right kind.
	ErrUnknownRef = errors.New("unknown git ref")
	// ErrInvalidSession is returned when a session id cannot be used as a
	// ref component and a directory name.
	ErrInvalidSession = errors.New("invalid session id")
	// ErrExists is returned when the session's branch or directory already
	// exists.
	ErrExists = errors.New("worktree already exists")
	// ErrMissing is returned when a worktree's directory is gone (Recreate
	// brings it back from its branch) or the branch to re-create it from is
	// gone.
	ErrMissing = errors.New("worktree is missing")
	// ErrNoSpace is (wrapped in) the error of an operation that failed
	// because the disk is full: a file the Manager writes, or a git command
	// that said so. It is syscall.ENOSPC, which os errors wrap already.
	ErrNoSpace error = syscall.ENOSPC
)

// userError is an error with the sentence a user should read (see
// UserMessage) in front of its technical cause, which Error and Unwrap
// keep.
type userError struct {
	msg string
	err error
}

func (e *userError) Error() string { return e.err.Error() }
func (e *userError) Unwrap() error { return e.err }

// UserMessage says what is wrong and what to do, in a sentence.
func (e *userError) UserMessage() string { return e.msg }

// maxStderr bounds the stderr kept in a GitError; the tail is kept because
// git puts its fatal message last.
const maxStderr = 4096

// GitError is a failed git invocation.
type GitError struct {
	// Args are the git arguments after the global options the Manager adds.
	Args []string
	// Dir is the directory git ran in (-C).
	Dir string
	// ExitCode is git's exit status, or -1 when git did not exit normally
	// (not started, killed, cancelled).
	ExitCode int
	// Stderr is git's standard error, trimmed and bounded.
	Stderr string
	// Err is the underlying error: an *exec.ExitError, a start failure, or
	// the context's cause when the context ended the command.
	Err error
}

// Error describes the command, its exit status and git's message.
func (e *GitError) Error() string {
	var b strings.Builder
	b.WriteString("git ")
	b.WriteString(strings.Join(e.Args, " "))
	if e.ExitCode >= 0 {
		fmt.Fprintf(&b, ": exit status %d", e.ExitCode)
	} else if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.Stderr != "" {
		b.WriteString(": ")
		b.WriteString(e.Stderr)
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *GitError) Unwrap() error { return e.Err }

// Is reports whether target is ErrNoSpace and git said that the disk (or
// the user's quota) is full.
func (e *GitError) Is(target error) bool {
	return target == ErrNoSpace && (strings.Contains(e.Stderr, "No space left on device") ||
		strings.Contains(e.Stderr, "Disk quota exceeded"))
}

// trimStderr trims space and keeps at most maxStderr bytes of the tail.
func trimStderr(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) <= maxStderr {
		return s
	}
	s = s[len(s)-maxStderr:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	return "..." + s
}
