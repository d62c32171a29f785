package acpfs

import (
	"errors"
	"io/fs"
)

// Errors returned by Guard, FS and Terminals. Returned errors wrap one of
// these and name the offending path or terminal in their message; test them
// with errors.Is.
var (
	// ErrRelativePath refuses a path that is not absolute: ACP paths are.
	ErrRelativePath = errors.New("path is not absolute")
	// ErrOutsideRoot refuses a path, or a symlink on the way to it, that
	// leads outside the worktree.
	ErrOutsideRoot = errors.New("path is outside the worktree")
	// ErrNulByte refuses a path that contains a NUL byte.
	ErrNulByte = errors.New("path contains a NUL byte")
	// ErrSymlinkLoop refuses a path whose symlinks do not resolve (a loop or
	// too many links in a row).
	ErrSymlinkLoop = errors.New("too many levels of symbolic links")
	// ErrGitDir refuses a write into the worktree's .git.
	ErrGitDir = errors.New("writes to .git are not allowed")
	// ErrNotFound is a read of a file that does not exist (ACP -32002).
	// It wraps fs.ErrNotExist too.
	ErrNotFound = notFoundError{}
	// ErrTooLarge refuses a file or content over the size limit.
	ErrTooLarge = errors.New("file is over the size limit")
	// ErrNotText refuses a file that is not UTF-8 text (NUL bytes or
	// invalid UTF-8).
	ErrNotText = errors.New("file is not UTF-8 text")
	// ErrIsDirectory refuses a file operation on a directory.
	ErrIsDirectory = errors.New("path is a directory")
	// ErrNotDirectory refuses a terminal cwd that is not a directory, or a
	// path that goes through a file as if it were one.
	ErrNotDirectory = errors.New("path is not a directory")
	// ErrNotRegular refuses a file operation on a device, FIFO or socket.
	ErrNotRegular = errors.New("path is not a regular file")
	// ErrTooManyTerminals refuses a terminal beyond the running limit.
	ErrTooManyTerminals = errors.New("too many running terminals")
	// ErrRetentionLimit refuses a terminal while too many terminals, or
	// too much of their output, are kept unreleased: the agent must
	// release the terminals it is done with.
	ErrRetentionLimit = errors.New("terminal retention limit reached: release finished terminals")
	// ErrUnknownTerminal is an id that was never issued or was released.
	ErrUnknownTerminal = errors.New("unknown terminal")
	// ErrPermissionDenied is an operation the agent's permission policy, or
	// a person it asked, refused (see WithAuthorizer).
	ErrPermissionDenied = errors.New("permission denied")
	// ErrClosed is a call on a closed Guard, FS or Terminals.
	ErrClosed = errors.New("closed")
)

// notFoundError is ErrNotFound: its own type so that it also matches
// fs.ErrNotExist.
type notFoundError struct{}

func (notFoundError) Error() string { return "resource not found" }

func (notFoundError) Is(target error) bool { return target == fs.ErrNotExist }
