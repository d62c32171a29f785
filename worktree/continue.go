package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ContinueOptions says where a session continues from (see Continue).
type ContinueOptions struct {
	// Branch is the session branch on the remote (default BranchPrefix +
	// session).
	Branch string
	// Checkpoint is the commit of the session's checkpoint ref that was
	// last pushed (as the caller recorded it); "" takes what the remote's
	// CheckpointRefPrefix+session holds. A session never checkpointed
	// continues from its branch alone.
	Checkpoint string
	// BaseCommit is the commit the session started from, as recorded;
	// it is returned in the Worktree (Continue does not compute it).
	BaseCommit string
}

// Continue makes, on this host, the worktree of a session that another
// host made from the repository repo (a URL, or a bare repository's
// path) and pushed (see Push): the mirror is fetched (made if need be),
// with the session's branch and checkpoint ref, taken as the remote holds
// them; the worktree is added on the session branch, and its files are
// put in the state of the checkpoint (the work the session had not
// committed), its index at the branch. What this host fetched is
// recorded as pushed (see LastPushed), so that its next Push expects it;
// the second result is that value.
//
// Errors wrap ErrNotMirrored (repo is a local checkout), ErrInvalidURL,
// ErrInvalidSession, ErrExists (the session's worktree or branch is
// already on this host), ErrMissing (the remote has no such branch) or
// ErrUnknownRef (the checkpoint is not a commit the remote has).
func (m *Manager) Continue(ctx context.Context, session, repo string, opts ContinueOptions) (Worktree, Pushed, error) {
	if err := ValidSession(session); err != nil {
		return Worktree{}, Pushed{}, err
	}
	r, err := m.remoteFor(ctx, repo)
	if err != nil {
		if errors.Is(err, ErrNotRepository) && !IsURL(repo) {
			err = fmt.Errorf("%w: %w", ErrNotMirrored, err)
		}
		return Worktree{}, Pushed{}, err
	}
	if m.mirrors == "" {
		return Worktree{}, Pushed{}, fmt.Errorf("%w: this Manager has no mirror root", ErrNotMirrored)
	}
	branch := opts.Branch
	if branch == "" {
		branch = BranchPrefix + session
	}
	if err := validRev(branch); err != nil {
		return Worktree{}, Pushed{}, err
	}
	if opts.Checkpoint != "" {
		if err := validRev(opts.Checkpoint); err != nil {
			return Worktree{}, Pushed{}, err
		}
	}
	lock := m.repoLock(m.mirrorDir(r.url))
	lock.Lock()
	defer lock.Unlock()
	info, err := m.ensureMirrorLocked(ctx, r)
	if err != nil {
		return Worktree{}, Pushed{}, err
	}
	if _, err := m.git(ctx, at(info.top), "check-ref-format", "refs/heads/"+branch); err != nil {
		return Worktree{}, Pushed{}, fmt.Errorf("%w: %q is not a valid branch name", ErrUnknownRef, branch)
	}
	path := filepath.Join(m.namespace(info.top), session)
	if _, err := os.Lstat(path); err == nil {
		return Worktree{}, Pushed{}, fmt.Errorf("%w: %s exists", ErrExists, path)
	}
	if co, err := m.checkedOut(ctx, info, "refs/heads/"+branch); err != nil {
		return Worktree{}, Pushed{}, err
	} else if co != "" {
		return Worktree{}, Pushed{}, fmt.Errorf("%w: branch %s is checked out in %s on this host", ErrExists, branch, co)
	}
	pushed, err := m.fetchSession(ctx, info, session, branch)
	if err != nil {
		return Worktree{}, Pushed{}, err
	}
	checkpoint := pushed.Checkpoint
	if opts.Checkpoint != "" {
		ids, err := m.resolve(ctx, repoAt(info), opts.Checkpoint+"^{commit}")
		if err != nil {
			return Worktree{}, Pushed{}, err
		}
		if ids[0] == "" {
			return Worktree{}, Pushed{}, fmt.Errorf("%w: checkpoint %s is not a commit of %s", ErrUnknownRef, opts.Checkpoint, redactURL(r.url))
		}
		checkpoint = ids[0]
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return Worktree{}, Pushed{}, fmt.Errorf("continue session %q: %w", session, err)
	}
	if _, err := m.git(ctx, at(info.top), "worktree", "add", "--quiet", "--", path, branch); err != nil {
		m.undoContinueLocked(context.WithoutCancel(ctx), info, path)
		return Worktree{}, Pushed{}, fmt.Errorf("continue session %q: %w", session, err)
	}
	m.remember(info, path, branch)
	wt := Worktree{Session: session, Repo: info.name(), Path: path, Branch: branch, BaseCommit: opts.BaseCommit, CreatedAt: time.Now().UTC()}
	if checkpoint != "" {
		if err := m.restore(ctx, wt, checkpoint); err != nil {
			m.undoContinueLocked(context.WithoutCancel(ctx), info, path)
			return Worktree{}, Pushed{}, fmt.Errorf("continue session %q: put the checkpoint's files in place: %w", session, err)
		}
	}
	if err := m.startView(info, path, branch, pushed.Branch); err != nil {
		m.undoContinueLocked(context.WithoutCancel(ctx), info, path)
		return Worktree{}, Pushed{}, fmt.Errorf("continue session %q: %w", session, err)
	}
	if err := m.recordPushed(ctx, info, session, pushed); err != nil {
		m.log.Warn("continue: record what was fetched", keySession, session, keyErr, err)
	}
	m.log.Info("worktree continued", keySession, session, keyRepo, redactURL(r.url), keyPath, path, keyBranch, branch, keyCommit, checkpoint)
	return wt, pushed, nil
}

// fetchSession fetches the session's branch and checkpoint ref from the
// remote into the mirror as the remote holds them, and returns them.
func (m *Manager) fetchSession(ctx context.Context, info repoInfo, session, branch string) (Pushed, error) {
	r := info.remote
	lsArgs := append(append([]string{}, netConfig...), "ls-remote")
	lsArgs = append(lsArgs, m.remoteProgram(r, "--upload-pack", "upload-pack")...)
	out, err := m.git(ctx, at(info.top), append(lsArgs, "--end-of-options", r.url, "refs/heads/"+branch, CheckpointRefPrefix+session)...)
	if err != nil {
		return Pushed{}, fmt.Errorf("list the session's refs on %s: %w", redactURL(r.url), err)
	}
	var p Pushed
	for _, line := range splitLines(out) {
		id, ref, ok := cutTab(line)
		switch {
		case !ok:
		case ref == "refs/heads/"+branch:
			p.Branch = id
		case ref == CheckpointRefPrefix+session:
			p.Checkpoint = id
		}
	}
	if p.Branch == "" {
		return Pushed{}, fmt.Errorf("%w: %s has no branch %s: nothing was pushed of session %q", ErrMissing, redactURL(r.url), branch, session)
	}
	specs := []string{"+refs/heads/" + branch + ":refs/heads/" + branch}
	if p.Checkpoint != "" {
		specs = append(specs, "+"+CheckpointRefPrefix+session+":"+CheckpointRefPrefix+session)
	}
	args := append(append([]string{}, netConfig...), "fetch", "--quiet", "--no-write-fetch-head", "--no-auto-gc")
	args = append(args, m.remoteProgram(r, "--upload-pack", "upload-pack")...)
	if _, err := m.git(ctx, at(info.top), append(append(args, "--end-of-options", r.url), specs...)...); err != nil {
		return Pushed{}, fmt.Errorf("fetch session %q from %s: %w", session, redactURL(r.url), err)
	}
	// What was fetched is what the mirror holds now (the remote may have
	// moved in between: read it back).
	ids, err := m.resolve(ctx, repoAt(info), "refs/heads/"+branch, CheckpointRefPrefix+session)
	if err != nil {
		return Pushed{}, err
	}
	p.Branch = ids[0]
	if p.Checkpoint != "" {
		p.Checkpoint = ids[1]
	}
	return p, nil
}

// undoContinueLocked removes what a failed Continue added: the worktree's
// registration and directory. The fetched refs stay (they are the
// remote's).
func (m *Manager) undoContinueLocked(ctx context.Context, info repoInfo, path string) {
	if _, err := m.git(ctx, at(info.top), "worktree", "remove", "--force", "--", path); err != nil {
		m.log.Warn("undo continue: unregister worktree", keyPath, path, keyErr, err)
	}
	_ = os.RemoveAll(path)
	_ = os.Remove(filepath.Dir(path))
	m.dropView(path)
	m.forget(path)
}

// splitLines splits git's output into its non-empty lines.
func splitLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// cutTab cuts an "<id>\t<ref>" line of ls-remote.
func cutTab(line string) (id, ref string, ok bool) {
	return strings.Cut(line, "\t")
}

// Abandon removes this host's worktree of session, a session of the
// repository repo (a URL) that continues on another host since: a copy
// left behind when this host lost the session (it died, or could not
// renew its lease), which stands in the way of Continue. Its directory
// and its registration in the mirror go; what it held past the last push
// was reported lost when the session moved. A session with no worktree
// here is not an error.
func (m *Manager) Abandon(ctx context.Context, session, repo string) error {
	if err := ValidSession(session); err != nil {
		return err
	}
	r, err := m.remoteFor(ctx, repo)
	if err != nil {
		return err
	}
	if m.mirrors == "" {
		return fmt.Errorf("%w: this Manager has no mirror root", ErrNotMirrored)
	}
	lock := m.repoLock(m.mirrorDir(r.url))
	lock.Lock()
	defer lock.Unlock()
	info, err := m.ensureMirrorLocked(ctx, r)
	if err != nil {
		return err
	}
	path := filepath.Join(m.namespace(info.top), session)
	if _, err := os.Lstat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			_, _ = m.git(ctx, at(info.top), "worktree", "prune")
			m.dropView(path)
			return nil
		}
		return fmt.Errorf("abandon session %q: %w", session, err)
	}
	m.log.Warn("worktree of a session that continued on another host removed", keySession, session, keyPath, path)
	m.undoContinueLocked(ctx, info, path)
	_, _ = m.git(ctx, at(info.top), "worktree", "prune")
	return nil
}
