package worktree

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// TestNoSpaceErrors: a git command that ran out of disk and a file write
// that did are both ErrNoSpace; other failures are not.
func TestNoSpaceErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"git", &GitError{Args: []string{"add", "-A"}, ExitCode: 128,
			Stderr: "error: unable to write file x: No space left on device\nfatal: updating files failed"}, true},
		{"git quota", &GitError{ExitCode: 128, Stderr: "fatal: write error: Disk quota exceeded"}, true},
		{"git other", &GitError{ExitCode: 128, Stderr: "fatal: not a git repository"}, false},
		{"file", fmt.Errorf("checkpoint: %w", &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), true},
		{"file other", &fs.PathError{Op: "write", Path: "/x", Err: syscall.EIO}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fmt.Errorf("checkpoint: %w", tt.err)
			if got := errors.Is(err, ErrNoSpace); got != tt.want {
				t.Errorf("errors.Is(%v, ErrNoSpace) = %v; want %v", err, got, tt.want)
			}
		})
	}
}
