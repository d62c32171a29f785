package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Create makes the worktree of session from repo (any path inside the
// user's working tree) at baseRef ("" means the repository's HEAD), on the
// new branch BranchPrefix+session, at
// <Root>/<repo-name>-<hash>/<session>. The main checkout may be dirty: it is
// neither read nor changed.
//
// The repository's setup file (SetupFileName at the top of the main
// checkout's working tree, see LoadSetup) is read first: an invalid one
// refuses the worktree. What it asks for is prepared for RunSetup, which
// the caller runs (in the background: it may take minutes) and WaitSetup
// waits for, when the user trusted that exact content (see Trust); an
// untrusted file runs nothing, and RunSetup reports SetupUntrusted.
//
// Errors wrap ErrInvalidSession, ErrNotRepository, ErrBareRepository,
// ErrSetupConfig, ErrUnknownRef (also for a repository without commits)
// or ErrExists (the branch or directory exists; use Recreate for a
// worktree whose directory was lost). A failed or cancelled Create leaves
// no branch, directory or registration behind.
func (m *Manager) Create(ctx context.Context, session, repo, baseRef string) (Worktree, error) {
	if err := ValidSession(session); err != nil {
		return Worktree{}, err
	}
	if baseRef == "" {
		baseRef = "HEAD"
	}
	if err := validRev(baseRef); err != nil {
		return Worktree{}, err
	}
	if r, ok, err := remoteOf(repo); ok {
		if err != nil {
			return Worktree{}, err
		}
		return m.createFromRemote(ctx, session, r, baseRef)
	}
	info, err := m.localRepo(ctx, repo)
	if errors.Is(err, ErrBareRepository) && m.mirrors != "" {
		abs, _ := filepath.Abs(repo)
		return m.createFromRemote(ctx, session, bareRemote(abs), baseRef)
	}
	if err != nil {
		return Worktree{}, err
	}
	if within(info.top, m.root) && !m.ignored(ctx, info.top, m.root) {
		return Worktree{}, fmt.Errorf("worktree root %s is inside repository %s and not ignored by it: worktrees must live outside it, or in a directory the repository ignores", m.root, info.top)
	}
	setup, hasSetup, err := m.loadSetupFile(info.top)
	if err != nil {
		return Worktree{}, err
	}
	branch := BranchPrefix + session

	lock := m.repoLock(info.common)
	lock.Lock()
	defer lock.Unlock()

	ids, err := m.resolve(ctx, at(info.top), baseRef+"^{commit}", "refs/heads/"+branch, baseRef+"^{commit}^{tree}")
	if err != nil {
		return Worktree{}, fmt.Errorf("create worktree for session %q: %w", session, err)
	}
	base := ids[0]
	if base == "" {
		err := fmt.Errorf("%w: %q is not a commit in %s", ErrUnknownRef, baseRef, info.top)
		if baseRef == "HEAD" {
			// HEAD names no commit only on an unborn branch.
			return Worktree{}, &userError{msg: "the repository " + info.top + " has no commit yet: commit something first (git commit --allow-empty -m init)", err: err}
		}
		return Worktree{}, &userError{msg: fmt.Sprintf("%q is not a commit in %s (a branch, tag or commit id, as git log shows)", baseRef, info.top), err: err}
	}
	if ids[1] != "" {
		return Worktree{}, fmt.Errorf("%w: branch %s already exists in %s", ErrExists, branch, info.top)
	}
	return m.addLocked(ctx, session, info, base, ids[2], setup, hasSetup)
}

// addLocked adds the worktree of session to the repository info, on a new
// session branch at base (whose tree is baseTree, "" if unknown), and
// prepares its setup (see Create). The repository's lock must be held.
func (m *Manager) addLocked(ctx context.Context, session string, info repoInfo, base, baseTree string, setup SetupFile, hasSetup bool) (Worktree, error) {
	path := filepath.Join(m.namespace(info.top), session)
	branch := BranchPrefix + session
	if _, err := os.Lstat(path); err == nil {
		return Worktree{}, fmt.Errorf("%w: %s exists", ErrExists, path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return Worktree{}, fmt.Errorf("create worktree for session %q: %w", session, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		if full := diskFull(path); full != nil && errors.Is(err, ErrNoSpace) {
			return Worktree{}, fmt.Errorf("create worktree for session %q: %w: %w", session, full, err)
		}
		return Worktree{}, fmt.Errorf("create worktree for session %q: %w", session, err)
	}
	if _, err := m.git(ctx, at(info.top), "worktree", "add", "--quiet", "-b", branch, "--", path, base); err != nil {
		// Look at the disks before the undo frees what git wrote.
		full := diskFull(path, info.common)
		m.undoCreateLocked(context.WithoutCancel(ctx), info, path, branch, base)
		if full != nil {
			return Worktree{}, fmt.Errorf("create worktree for session %q: %w: %w", session, full, err)
		}
		return Worktree{}, fmt.Errorf("create worktree for session %q: %w", session, err)
	}
	m.remember(info, path, branch)
	if err := m.startView(info, path, branch, base); err != nil {
		m.undoCreateLocked(context.WithoutCancel(ctx), info, path, branch, base)
		return Worktree{}, fmt.Errorf("create worktree for session %q: %w", session, err)
	}
	wt := Worktree{
		Session:    session,
		Repo:       info.name(),
		Path:       path,
		Branch:     branch,
		BaseCommit: base,
		CreatedAt:  time.Now().UTC(),
	}
	switch {
	case !hasSetup || setup.Setup.Empty():
		m.seedFresh(info, path, baseTree)
	case setup.Trusted:
		m.addSetup(path, info, setup.Setup)
	default:
		m.addUntrusted(wt, setup)
	}
	m.log.Info("worktree created", keySession, session, keyRepo, info.top, keyPath, path, keyCommit, base)
	return wt, nil
}

// undoCreateLocked removes what a failed `git worktree add` left: its
// registration, the directory (which did not exist before) and the branch
// if it still points at base. Errors are logged: the Create error is the one
// that matters.
func (m *Manager) undoCreateLocked(ctx context.Context, info repoInfo, path, branch, base string) {
	log := m.log.With(keyRepo, info.top, keyPath, path)
	if wts, err := m.list(ctx, info.top); err == nil {
		for _, w := range wts {
			if w.Path == path {
				if _, err := m.git(ctx, at(info.top), "worktree", "remove", "--force", "--", path); err != nil {
					log.Warn("undo create: unregister worktree", keyErr, err)
				}
			}
		}
	}
	if err := os.RemoveAll(path); err != nil {
		log.Warn("undo create: remove directory", keyErr, err)
	}
	_ = os.Remove(filepath.Dir(path)) // only if empty
	m.dropView(path)
	m.forget(path)
	if _, err := m.git(ctx, at(info.top), "update-ref", "-d", "refs/heads/"+branch, base); err != nil {
		if ids, rerr := m.resolve(ctx, at(info.top), "refs/heads/"+branch); rerr == nil && ids[0] != "" {
			log.Warn("undo create: delete branch", keyBranch, branch, keyErr, err)
		}
	}
}

// Recreate brings back the directory of a worktree that was lost (deleted
// by hand, or found missing by Reconcile) from its branch, which holds all
// its committed and preserved work. It returns wt with Repo and Branch
// filled in (Repo as the top level of the working tree).
// Errors wrap ErrExists when the directory is present and ErrMissing when
// the branch is gone.
func (m *Manager) Recreate(ctx context.Context, wt Worktree) (Worktree, error) {
	if err := ValidSession(wt.Session); err != nil {
		return Worktree{}, err
	}
	if !filepath.IsAbs(wt.Path) {
		return Worktree{}, fmt.Errorf("recreate worktree: path %q is not absolute", wt.Path)
	}
	info, err := m.repo(ctx, wt.Repo)
	if err != nil {
		return Worktree{}, err
	}
	branch := branchOf(wt)
	lock := m.repoLock(info.common)
	lock.Lock()
	defer lock.Unlock()

	if _, err := os.Lstat(wt.Path); err == nil {
		return Worktree{}, fmt.Errorf("%w: %s exists", ErrExists, wt.Path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return Worktree{}, fmt.Errorf("recreate worktree %s: %w", wt.Path, err)
	}
	// What the agent committed in its view before the directory was lost
	// joins the branch, which the view then follows.
	wt.Branch = branch
	st := m.state(wt.Path)
	st.mu.Lock()
	_, err = m.importLocked(ctx, info, wt, st, true)
	st.mu.Unlock()
	if err != nil {
		return Worktree{}, fmt.Errorf("recreate worktree %s: %w", wt.Path, err)
	}
	ids, err := m.resolve(ctx, at(info.top), "refs/heads/"+branch)
	if err != nil {
		return Worktree{}, fmt.Errorf("recreate worktree %s: %w", wt.Path, err)
	}
	if ids[0] == "" {
		return Worktree{}, fmt.Errorf("%w: branch %s is gone from %s; the worktree cannot be re-created", ErrMissing, branch, info.top)
	}
	wts, err := m.list(ctx, info.top)
	if err != nil {
		return Worktree{}, fmt.Errorf("recreate worktree %s: %w", wt.Path, err)
	}
	for _, w := range wts {
		if filepath.Clean(w.Path) == filepath.Clean(wt.Path) {
			// The stale registration of the lost directory.
			if _, err := m.git(ctx, at(info.top), "worktree", "remove", "--force", "--", wt.Path); err != nil {
				return Worktree{}, fmt.Errorf("recreate worktree %s: clear stale registration: %w", wt.Path, err)
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(wt.Path), 0o755); err != nil {
		return Worktree{}, fmt.Errorf("recreate worktree %s: %w", wt.Path, err)
	}
	if _, err := m.git(ctx, at(info.top), "worktree", "add", "--quiet", "--", wt.Path, branch); err != nil {
		_ = os.Remove(wt.Path) // only if git left it empty
		return Worktree{}, fmt.Errorf("recreate worktree %s: %w", wt.Path, err)
	}
	m.forget(wt.Path)
	m.remember(info, wt.Path, branch)
	if err := m.startView(info, wt.Path, branch, ids[0]); err != nil {
		// The worktree is back; Reconcile makes the view.
		m.log.Warn("re-created worktree without its private git view", keySession, wt.Session, keyPath, wt.Path, keyErr, err)
	}
	m.log.Info("worktree re-created", keySession, wt.Session, keyRepo, info.top, keyPath, wt.Path, keyBranch, branch)
	wt.Repo = info.name()
	wt.Branch = branch
	return wt, nil
}

// ignored reports whether the repository at top ignores path, so worktrees
// under it never show up in the repository (e.g. a data directory listed in
// its .gitignore).
func (m *Manager) ignored(ctx context.Context, top, path string) bool {
	// check-ignore refuses literal pathspecs, which every other call uses.
	_, err := m.run(ctx, call{at: at(top), args: []string{"check-ignore", "-q", "--", path}, env: []string{"GIT_LITERAL_PATHSPECS=0"}})
	return err == nil
}

// remember caches the git directories of the worktree just added at path,
// before any agent could tamper with them.
func (m *Manager) remember(info repoInfo, path, branch string) {
	m.forget(path)
	m.rememberRepo(info.name(), info)
	admin, err := findAdmin(info.common, path)
	if err != nil {
		m.log.Warn("locate new worktree", keyPath, path, keyErr, err)
		return
	}
	m.state(path).paths.Store(&located{GitPaths: GitPaths{CommonDir: info.common, AdminDir: admin, Branch: branch}, repo: info.name()})
}
