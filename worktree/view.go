package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// An agent's git writes objects into the repository's shared store and
// moves its branch in the shared ref directory. Given write access there,
// a hostile agent can replace an existing loose object (new content under
// an old id: `git show` in the user's checkout then prints it, and only
// git fsck notices) and move other sessions' branches. So where the
// launcher gives an agent a mount namespace, the common git directory is
// read-only in its view but for:
//
//   - CommonDir/objects, an overlay whose upper directory is the view's
//     objects-upper: the objects the agent adds (or rewrites) land there
//     and change its own view alone;
//   - the branch's ref directory (GitPaths.RefDir), the view's refs
//     directory, which holds the branch's loose ref and nothing else: no
//     other session's branch is within reach;
//   - the branch's reflog directory (GitPaths.LogDir), the view's logs.
//
// The Manager imports what the agent committed, verified (see import.go),
// before every operation that reads or moves the session branch, and
// writes the branch's tip back into the view after every operation that
// moved it, so that the agent's view follows.
//
// A view lives at Root/.gitviews/<namespace>/<session>, beside the
// worktree Root/<namespace>/<session> and never inside anything an agent
// is granted (its worktree is; the view's directory is not, and only its
// parts are mounted):
//
//	objects-upper/  the overlay's upper directory
//	objects-work/   its work directory, on the same filesystem
//	refs/<leaf>     the private ref: <leaf> is the branch name's last element
//	logs/           the branch's reflog as the agent's git writes it
//
// It is made with its worktree (Create, Recreate, Continue; Reconcile
// makes the missing ones) and removed with it (Remove, Prune; Reconcile
// removes those whose worktree is gone). Where no view is mounted, the
// agent's git writes the real ref: the private ref then stays behind the
// branch and importing it does nothing (but for an agent that moves its
// branch back behind it: the import fast-forwards the branch again to
// the commit the private ref holds, one the Manager itself recorded).

// viewsDirName is the directory under Root holding the private git views;
// never a repository namespace.
const viewsDirName = ".gitviews"

// The parts of a view.
const (
	viewUpper = "objects-upper"
	viewWork  = "objects-work"
	viewRefs  = "refs"
	viewLogs  = "logs"
)

// staleRefLock is the age past which a lock file left on the private ref
// (by an agent killed mid-update) no longer holds the Manager off.
const staleRefLock = 30 * time.Second

// errViewBusy and errViewMoved say why the private ref was not written:
// the agent's git holds its lock, or moved it since the Manager last read
// it. The next import deals with what the agent did.
var (
	errViewBusy  = errors.New("the agent's git holds the private ref's lock")
	errViewMoved = errors.New("the agent moved its private ref")
)

// GitView is the private git state of a session worktree, which a mount
// namespace shows its agent in place of the shared object store and ref
// directory (see view.go). Paths are absolute.
type GitView struct {
	// Dir holds the parts below; it is the Manager's and never granted.
	Dir string
	// ObjectsUpper and ObjectsWork are the upper and work directories of
	// the overlay mounted on CommonDir/objects.
	ObjectsUpper, ObjectsWork string
	// Refs is mounted on GitPaths.RefDir, Logs on GitPaths.LogDir.
	Refs, Logs string
	// Ref is the branch's loose ref as the agent's git sees it: Refs/<the
	// branch name's last element>.
	Ref string
}

// Set reports whether v names a view.
func (v GitView) Set() bool { return v.Dir != "" }

// viewFor returns the view of the worktree at wtPath on branch, present or
// not; zero for a branch that lies directly in refs/heads, whose ref
// directory holds every other branch too.
func (m *Manager) viewFor(wtPath, branch string) GitView {
	if !strings.Contains(branch, "/") || !filepath.IsAbs(wtPath) {
		return GitView{}
	}
	dir := m.viewDir(wtPath)
	refs := filepath.Join(dir, viewRefs)
	return GitView{
		Dir:          dir,
		ObjectsUpper: filepath.Join(dir, viewUpper),
		ObjectsWork:  filepath.Join(dir, viewWork),
		Refs:         refs,
		Logs:         filepath.Join(dir, viewLogs),
		Ref:          filepath.Join(refs, path.Base(branch)),
	}
}

// viewDir is the directory of the view of the worktree at wtPath (an
// absolute path): Root/.gitviews/<namespace>/<session>.
func (m *Manager) viewDir(wtPath string) string {
	wtPath = filepath.Clean(wtPath)
	return filepath.Join(m.root, viewsDirName, filepath.Base(filepath.Dir(wtPath)), filepath.Base(wtPath))
}

// viewOf returns the view of the worktree at wtPath on branch if its
// directory exists, else zero.
func (m *Manager) viewOf(wtPath, branch string) GitView {
	v := m.viewFor(wtPath, branch)
	if !v.Set() {
		return v
	}
	if fi, err := os.Lstat(v.Dir); err != nil || !fi.IsDir() {
		return GitView{}
	}
	return v
}

// makeView makes the view of the worktree at wtPath whose git directories
// are p, and the directories the launcher mounts it on; parts already
// there are kept. The private ref is set to tip when overwrite is true or
// it is missing. It returns the view (zero for a branch without one).
func (m *Manager) makeView(p GitPaths, wtPath, tip string, overwrite bool) (GitView, error) {
	v := m.viewFor(wtPath, p.Branch)
	if !v.Set() {
		return v, nil
	}
	if err := os.MkdirAll(v.Dir, 0o700); err != nil {
		return GitView{}, fmt.Errorf("make the private git view: %w", err)
	}
	for _, d := range []string{v.ObjectsUpper, v.ObjectsWork, v.Refs, v.Logs} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return GitView{}, fmt.Errorf("make the private git view: %w", err)
		}
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			return GitView{}, fmt.Errorf("make the private git view: %s is not a directory", d)
		}
	}
	// The mount points: git removes a ref directory left empty.
	for _, d := range []string{p.RefDir(), p.LogDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return GitView{}, fmt.Errorf("make the private git view: %w", err)
		}
	}
	if tip == "" {
		return v, nil
	}
	if !overwrite {
		if cur, err := privateRef(v); err != nil || cur != "" {
			return v, nil // the agent's: imported, or refused, later
		}
	}
	if err := writePrivateRef(v, tip, "", false); err != nil {
		return GitView{}, fmt.Errorf("make the private git view: %w", err)
	}
	return v, nil
}

// startView makes the view of the worktree just made (or re-made) at
// wtPath on branch, with its private ref at tip, the branch's tip, and
// records tip as dealt with.
func (m *Manager) startView(info repoInfo, wtPath, branch, tip string) error {
	if _, err := m.makeView(GitPaths{CommonDir: info.common, Branch: branch}, wtPath, tip, true); err != nil {
		return err
	}
	st := m.state(wtPath)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.viewRef = tip
	return nil
}

// ensureViewLocked makes the parts of wt's view that are missing (all of
// it for a worktree made before views were), without touching the
// agent's private ref unless it is missing. The repository's lock must
// be held.
func (m *Manager) ensureViewLocked(ctx context.Context, info repoInfo, wt Worktree) error {
	branch := branchOf(wt)
	v := m.viewFor(wt.Path, branch)
	if !v.Set() {
		return nil
	}
	tip := ""
	if cur, err := privateRef(v); err == nil && cur == "" {
		ids, err := m.resolve(ctx, repoAt(info), "refs/heads/"+branch)
		if err != nil {
			return err
		}
		tip = ids[0]
	}
	made := !lexists(v.Dir)
	if _, err := m.makeView(GitPaths{CommonDir: info.common, Branch: branch}, wt.Path, tip, false); err != nil {
		return err
	}
	if made {
		m.log.Info("private git view made", keySession, wt.Session, keyPath, v.Dir)
	}
	return nil
}

// dropView removes the view of the worktree at wtPath, and its namespace
// directory if that is left empty. A failure is logged: Reconcile removes
// what is left.
func (m *Manager) dropView(wtPath string) {
	if !filepath.IsAbs(wtPath) {
		return
	}
	dir := m.viewDir(wtPath)
	if !lexists(dir) {
		return
	}
	if err := removeTree(dir); err != nil {
		m.log.Warn("remove the private git view", keyPath, dir, keyErr, err)
		return
	}
	_ = os.Remove(filepath.Dir(dir)) // only if empty
}

// removeTree removes dir and everything in it, even directories left
// without permissions (an overlay's work directory).
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// privateRef reads the view's private ref as the agent's git left it
// (trimmed; "" when there is none). A symlink, FIFO or directory in its
// place is an error.
func privateRef(v GitView) (string, error) {
	s, err := readGitFile(v.Ref)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return s, err
}

// refKey is what the Manager remembers of a private ref it dealt with:
// its content, or why it could not be read.
func refKey(content string, err error) string {
	if err != nil {
		return "\x00" + err.Error()
	}
	return content
}

// writePrivateRef sets the view's private ref to id as git does, through
// a lock file that the agent's own git respects: when check is true, only
// if it still holds expect (errViewMoved otherwise). A lock the agent's
// git holds is errViewBusy, unless it is stale.
func writePrivateRef(v GitView, id, expect string, check bool) error {
	lock := v.Ref + ".lock"
	var f *os.File
	for attempt := 0; ; attempt++ {
		var err error
		f, err = os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("write the private ref: %w", err)
		}
		fi, serr := os.Lstat(lock)
		if attempt > 0 || serr != nil || time.Since(fi.ModTime()) < staleRefLock {
			return errViewBusy
		}
		_ = os.Remove(lock)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(lock)
		}
	}()
	if check {
		if cur, err := privateRef(v); err != nil || cur != expect {
			return errViewMoved
		}
	}
	if _, err := f.WriteString(id + "\n"); err != nil {
		return fmt.Errorf("write the private ref: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write the private ref: %w", err)
	}
	done = true
	if err := os.Rename(lock, v.Ref); err != nil {
		os.Remove(lock)
		return fmt.Errorf("write the private ref: %w", err)
	}
	return nil
}

// exportLocked writes the session branch's tip into the worktree's view
// after an operation that may have moved the branch from before, so that
// the agent's view follows (the new objects packed so that a live view
// finds them: see packForView); a branch that did not move is left
// alone. A private ref the agent moved since the Manager last dealt with
// it is left too: the next import deals with it. Failures are logged.
// The repository's lock and st.mu must be held.
func (m *Manager) exportLocked(ctx context.Context, info repoInfo, wt Worktree, st *wtState, before string) {
	branch := branchOf(wt)
	v := m.viewOf(wt.Path, branch)
	if !v.Set() {
		return
	}
	ids, err := m.resolve(ctx, repoAt(info), "refs/heads/"+branch)
	if err != nil {
		m.log.Warn("read the session branch for the agent's view", keySession, wt.Session, keyErr, err)
		return
	}
	tip := ids[0]
	if tip == "" || tip == before {
		return
	}
	cur, rerr := privateRef(v)
	if st.viewRef != "" && refKey(cur, rerr) != st.viewRef {
		m.log.Info("the agent moved its branch meanwhile: its view keeps it until the next import", keySession, wt.Session, keyBranch, branch)
		return
	}
	if before != "" {
		if err := m.packForView(ctx, info, before, tip); err != nil {
			m.log.Warn("pack the session branch's new objects for the agent's view", keySession, wt.Session, keyErr, err)
		}
	}
	if err := writePrivateRef(v, tip, cur, rerr == nil); err != nil {
		m.log.Warn("write the session branch into the agent's view", keySession, wt.Session, keyBranch, branch, keyErr, err)
		return
	}
	st.viewRef = tip
}

// packForView copies into a new pack of the repository the loose objects
// that tip has and before does not. An agent's view, mounted before the
// Manager made them, may not see them where they are: overlayfs keeps
// what a lookup in its lower layer found missing (a fan-out directory,
// an object's name) and answers it again, but a pack is found by listing
// its directory, which it reads afresh, under a name no lookup asked for.
func (m *Manager) packForView(ctx context.Context, info repoInfo, before, tip string) error {
	_, err := m.run(ctx, call{at: repoAt(info), stdin: strings.NewReader(tip + "\n^" + before + "\n"),
		args: []string{"pack-objects", "--revs", "--incremental", "--local", "-q", filepath.Join(info.common, "objects", "pack", "pack")}})
	return err
}

// sweepViews removes the views whose worktree is gone: neither one of
// keep (the views of the worktrees the caller knows) nor next to a
// worktree directory under the root. It reports each in problems when it
// cannot.
func (m *Manager) sweepViews(keep map[string]bool) []Problem {
	root := filepath.Join(m.root, viewsDirName)
	nss, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return []Problem{{Path: root, Err: err}}
	}
	var problems []Problem
	for _, ns := range nss {
		nsDir := filepath.Join(root, ns.Name())
		ents, err := os.ReadDir(nsDir)
		if err != nil {
			problems = append(problems, Problem{Path: nsDir, Err: err})
			continue
		}
		for _, e := range ents {
			dir := filepath.Join(nsDir, e.Name())
			if keep[dir] || lexists(filepath.Join(m.root, ns.Name(), e.Name())) {
				continue
			}
			if err := removeTree(dir); err != nil {
				problems = append(problems, Problem{Path: dir, Session: e.Name(), Err: fmt.Errorf("remove the private git view of a worktree that is gone: %w", err)})
				continue
			}
			m.log.Info("private git view of a worktree that is gone removed", keyPath, dir)
		}
		_ = os.Remove(nsDir) // only if empty
	}
	return problems
}
