package wiring

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/worktree"
)

// Trust adapts the worktree manager's trust of setup files to
// httpapi.Trust.
type Trust struct{ M *worktree.Manager }

var _ httpapi.Trust = Trust{}

// SetupFile reads a repository's setup file.
func (t Trust) SetupFile(ctx context.Context, repo string) (httpapi.SetupFile, error) {
	sf, err := t.M.SetupFileOf(ctx, repo)
	if err != nil {
		return httpapi.SetupFile{}, trustError(err)
	}
	return setupFileOf(sf), nil
}

// Trust records the trust of a repository's setup file with hash sum.
func (t Trust) Trust(ctx context.Context, repo, sum string) (httpapi.TrustResult, error) {
	sf, waiting, err := t.M.Trust(ctx, repo, sum)
	if err != nil {
		return httpapi.TrustResult{}, trustError(err)
	}
	return httpapi.TrustResult{SetupFile: setupFileOf(sf), Waiting: waiting}, nil
}

// Revoke forgets a repository's trusted setup file.
func (t Trust) Revoke(ctx context.Context, repo string) (bool, error) {
	return t.M.Revoke(ctx, repo)
}

// List returns the trusted setup files.
func (t Trust) List() ([]httpapi.TrustEntry, error) {
	l, err := t.M.TrustList()
	out := make([]httpapi.TrustEntry, 0, len(l))
	for _, e := range l {
		out = append(out, httpapi.TrustEntry{Repo: e.Repo, SHA256: e.SHA256, TrustedAt: e.TrustedAt})
	}
	return out, err
}

func setupFileOf(sf worktree.SetupFile) httpapi.SetupFile {
	out := httpapi.SetupFile{Repo: sf.Repo, File: sf.File, SHA256: sf.SHA256, Content: string(sf.Content),
		Copy: sf.Setup.Copy, Command: sf.Setup.Command, Trusted: sf.Trusted, TrustedAt: sf.TrustedAt, TrustedSHA256: sf.TrustedSHA256}
	if len(sf.Setup.Command) > 0 {
		out.Timeout = sf.Setup.Timeout.String()
	}
	return out
}

// trustError maps the worktree's trust errors to the pool's sentinels.
func trustError(err error) error {
	switch {
	case errors.Is(err, worktree.ErrSetupChanged):
		return conflictError{err}
	case errors.Is(err, worktree.ErrNoSetupFile):
		return fmt.Errorf("%w: %w", pool.ErrNotFound, err)
	}
	return invalid(err)
}
