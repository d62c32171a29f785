package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Errors of Merge; test for them with errors.Is. Nothing was changed when
// one is returned.
var (
	// ErrConflict is returned when the merge would conflict, or would bring
	// in a file the setup copied from the main checkout (committed by the
	// agent itself); the message lists the paths.
	ErrConflict = errors.New("merge would conflict")
	// ErrDirty is returned when the checkout whose files a merge would
	// update is not fit for it: uncommitted changes to tracked files,
	// untracked or ignored files where the merge would write, or (with
	// Rebase) a worktree whose HEAD left the session branch.
	ErrDirty = errors.New("checkout is not clean")
	// ErrBranchInUse is returned when the branch to update is checked out
	// in a session's worktree, whose files belong to its agent.
	ErrBranchInUse = errors.New("branch is checked out in a session worktree")
)

// maxMergeCommits bounds the commits listed in a MergeResult.
const maxMergeCommits = 100

// Merge methods, as MergeResult.Method reports them.
const (
	MergeUpToDate    = "up-to-date"
	MergeFastForward = "fast-forward"
	MergeCommit      = "merge"
	MergeSquash      = "squash"
)

// MergeOptions says what Merge does.
type MergeOptions struct {
	// Into is the local branch to merge into ("main" or "refs/heads/main");
	// "" means Base.
	Into string
	// Base is the ref the session was created from: a local branch name,
	// or "" or "HEAD" for the branch checked out in the main checkout now.
	// Anything else (a commit, a tag, a remote branch) needs Into.
	Base string
	// Squash makes one commit of the session's work, on top of Into,
	// instead of a merge.
	Squash bool
	// Rebase brings the session's branch up to date with Into (or Base)
	// instead: Into is merged into the session's branch, in its worktree.
	Rebase bool
	// Title is the subject of a squash commit (default "agentpool session
	// <id>"); Summary is the body of a squash or merge commit.
	Title, Summary string
	// Lease, for a repository given by URL, is what the caller expects
	// the remote to hold of the session (see Push): with it, the session
	// branch is pushed with the merged branch, in the same atomic push.
	// Without it only the merged branch (or with Rebase nothing) is.
	Lease *Lease
}

// Commit is one commit a merge brought in.
type Commit struct {
	ID      string `json:"id"`
	Subject string `json:"subject"`
}

// MergeResult says what Merge did.
type MergeResult struct {
	// Branch is the session branch.
	Branch string `json:"branch"`
	// Into is the other branch: the one merged into, or with Rebase the
	// one merged from.
	Into string `json:"into"`
	// Rebase is true when the session's branch was brought up to date.
	Rebase bool `json:"rebase,omitempty"`
	// Committed is true when the session's uncommitted work was first
	// committed to Branch, as WorkCommit.
	Committed  bool   `json:"committed"`
	WorkCommit string `json:"work_commit,omitempty"`
	// Method is MergeUpToDate, MergeFastForward, MergeCommit or
	// MergeSquash.
	Method string `json:"method"`
	// Commits are the commits brought in (at most maxMergeCommits, newest
	// first); MoreCommits counts the others.
	Commits     []Commit `json:"commits"`
	MoreCommits int      `json:"more_commits,omitempty"`
	// Updated is the full name of the ref that moved, from Before to Head
	// (both equal when up to date).
	Updated string `json:"updated"`
	Before  string `json:"before"`
	Head    string `json:"head"`
	// WorkingTree is the checkout whose files were updated: the main
	// checkout (or another of the user's) when Into is checked out there,
	// the session's worktree with Rebase; "" when only a ref moved.
	WorkingTree string `json:"working_tree,omitempty"`
}

// Merge merges the session branch of wt into a branch of the main
// repository, or with Rebase brings the session branch up to date with
// that branch.
//
// First the worktree's uncommitted work (tracked and untracked files,
// .gitignore respected) is committed to the session branch, as Remove
// does; a worktree already removed merges its branch as it is. The
// merge is computed without a working tree (git merge-tree, git 2.38 or
// newer): if it would conflict, Merge returns an error wrapping
// ErrConflict that lists the paths, and changes nothing, not even the
// session branch. The files the worktree's setup copied are never part of
// the work committed (see copied.go); a branch whose own commits hold one
// (the agent committed it) is refused the same way, even once the worktree
// is removed. Without Squash a branch that can be fast-forwarded is;
// otherwise a merge commit (or with Squash, one commit on top of Into
// with Title and Summary) is made with the user's identity from the
// repository's configuration, or the Manager's without one.
//
// When Into is checked out in the main checkout (or another of the
// user's worktrees), that checkout must have no uncommitted changes to
// tracked files (else ErrDirty) and is fast-forwarded to the result with
// the user's own git merge: their hooks run, as for any merge of theirs.
// Otherwise the branch is moved with update-ref, guarded by its old
// value, and no working tree is touched. A branch checked out in a
// session worktree is refused (ErrBranchInUse).
//
// With Rebase, Into is merged into the session branch in the same way
// (fast-forward or merge commit, never touching the main checkout), and
// the worktree's files and index follow; on conflict, or when an ignored
// file would be overwritten, nothing changes.
//
// Other errors wrap ErrInvalidSession, ErrNotRepository, ErrUnknownRef
// (Into or Base is not a local branch) or ErrMissing (the session branch
// is gone, or Rebase on a removed worktree). A setup of the worktree
// still running is waited for. The caller makes sure no agent writes the
// worktree meanwhile.
func (m *Manager) Merge(ctx context.Context, wt Worktree, opts MergeOptions) (MergeResult, error) {
	if err := ValidSession(wt.Session); err != nil {
		return MergeResult{}, err
	}
	if !filepath.IsAbs(wt.Path) {
		return MergeResult{}, fmt.Errorf("merge: worktree path %q is not absolute", wt.Path)
	}
	if err := m.WaitSetup(ctx, wt); err != nil {
		return MergeResult{}, err
	}
	info, err := m.repo(ctx, wt.Repo)
	if err != nil {
		return MergeResult{}, err
	}
	lock := m.repoLock(info.common)
	lock.Lock()
	defer lock.Unlock()
	if info.remote.url != "" {
		// The base as the remote holds it now: the push expects it.
		if err := m.fetchLocked(ctx, info); err != nil {
			return MergeResult{}, fmt.Errorf("merge session %q: %w", wt.Session, err)
		}
	}
	st := m.state(wt.Path)
	st.mu.Lock()
	defer st.mu.Unlock()
	imp, ierr := m.importLocked(ctx, info, wt, st, true)
	if ierr != nil {
		m.log.Warn("merge: import the agent's commits", keySession, wt.Session, keyErr, ierr)
	}
	res, err := m.mergeLocked(ctx, info, wt, opts)
	// The work commit, or bringing the branch up to date, moved it.
	m.exportLocked(ctx, info, wt, st, imp.After)
	if err == nil && info.remote.url != "" {
		err = m.pushMergeLocked(ctx, info, wt, opts, res)
	}
	if err != nil {
		return MergeResult{}, fmt.Errorf("merge session %q: %w", wt.Session, err)
	}
	m.log.Info("session merged", keySession, wt.Session, keyBranch, res.Branch, "into", res.Into, "rebase", res.Rebase,
		"method", res.Method, keyCommit, res.Head, "committed", res.Committed)
	return res, nil
}

// mergeState is what Merge found before changing anything.
type mergeState struct {
	info   repoInfo
	repo   wtLoc  // the main repository
	live   bool   // the worktree's directory exists
	l      wtLoc  // the worktree, when live
	onTip  bool   // the worktree's HEAD is the session branch
	work   join   // the session branch with the uncommitted work
	target string // the other branch, short name
	into   string // its tip
}

// mergeLocked is Merge with the repository's and the worktree's locks held.
func (m *Manager) mergeLocked(ctx context.Context, info repoInfo, wt Worktree, opts MergeOptions) (MergeResult, error) {
	ms := mergeState{info: info, repo: at(info.top)}
	branch := branchOf(wt)
	var err error
	if ms.target, err = m.mergeTarget(ctx, info, branch, opts); err != nil {
		return MergeResult{}, err
	}
	if _, err := os.Lstat(wt.Path); err == nil {
		if ms.l, err = m.open(ctx, wt); err != nil {
			return MergeResult{}, err
		}
		ms.live = true
		tree, err := m.snapshot(ctx, ms.l)
		if err != nil {
			return MergeResult{}, err
		}
		head, err := m.headOf(ctx, ms.l)
		if err != nil {
			return MergeResult{}, err
		}
		if ms.work, err = m.planJoin(ctx, ms.repo, branch, tree, head, workMessage(wt, ms.target, opts)); err != nil {
			return MergeResult{}, err
		}
		h, _ := readGitFile(filepath.Join(ms.l.admin, "HEAD"))
		ms.onTip = h == "ref: refs/heads/"+branch
	} else if !errors.Is(err, os.ErrNotExist) {
		return MergeResult{}, err
	} else if opts.Rebase {
		return MergeResult{}, fmt.Errorf("%w: the session's worktree %s is gone: there is nothing to bring up to date", ErrMissing, wt.Path)
	}
	ids, err := m.resolve(ctx, ms.repo, "refs/heads/"+branch, "refs/heads/"+ms.target)
	if err != nil {
		return MergeResult{}, err
	}
	if ids[0] == "" {
		return MergeResult{}, fmt.Errorf("%w: branch %s is gone from %s", ErrMissing, branch, info.top)
	}
	if !ms.live {
		ms.work = join{ref: "refs/heads/" + branch, old: ids[0], tip: ids[0]}
	}
	ms.into = ids[1]
	res := MergeResult{Branch: branch, Into: ms.target, Rebase: opts.Rebase, Committed: ms.work.committed}
	if res.Committed {
		res.WorkCommit = ms.work.tip
	}
	if opts.Rebase {
		return m.rebaseLocked(ctx, ms, res, wt)
	}
	return m.mergeIntoLocked(ctx, ms, res, wt, opts)
}

// workMessage is the message of the commit that holds a session's
// uncommitted work before a merge.
func workMessage(wt Worktree, target string, opts MergeOptions) []string {
	why := "merged into " + target
	if opts.Rebase {
		why = "brought up to date with " + target
	}
	msg := []string{"agentpool: commit the work of session " + wt.Session}
	if opts.Summary != "" && !opts.Rebase {
		msg = append(msg, opts.Summary)
	}
	return append(msg, "agentpool committed the work left uncommitted in the session's worktree\n"+
		"(tracked and untracked files, .gitignore respected) before its branch was\n"+why+".",
		trailers(wt))
}

// mergeTarget returns the short name of the local branch opts names.
func (m *Manager) mergeTarget(ctx context.Context, info repoInfo, branch string, opts MergeOptions) (string, error) {
	name, what := opts.Into, "branch"
	if name == "" {
		name, what = opts.Base, "the session's base"
		if name == "" || name == "HEAD" {
			out, err := m.git(ctx, at(info.top), "symbolic-ref", "-q", "HEAD")
			if err != nil || !strings.HasPrefix(out, "refs/heads/") {
				return "", fmt.Errorf("%w: the session's base is HEAD, and the main checkout %s is on no branch now: say which branch to merge into", ErrUnknownRef, info.top)
			}
			name = out
		}
	}
	name = strings.TrimPrefix(name, "refs/heads/")
	if err := validRev(name); err != nil {
		return "", err
	}
	if _, err := m.git(ctx, at(info.top), "check-ref-format", "refs/heads/"+name); err != nil {
		return "", fmt.Errorf("%w: %s %q is not a valid branch name", ErrUnknownRef, what, name)
	}
	if name == branch {
		return "", fmt.Errorf("%w: %q is the session's own branch", ErrUnknownRef, name)
	}
	ids, err := m.resolve(ctx, at(info.top), "refs/heads/"+name)
	if err != nil {
		return "", err
	}
	if ids[0] == "" {
		if opts.Into == "" {
			return "", fmt.Errorf("%w: %s %q is not a local branch of %s: say which branch to merge into", ErrUnknownRef, what, name, info.top)
		}
		return "", fmt.Errorf("%w: no branch %q in %s", ErrUnknownRef, name, info.top)
	}
	return name, nil
}

// mergeIntoLocked merges the session branch (with its work) into the
// target branch.
func (m *Manager) mergeIntoLocked(ctx context.Context, ms mergeState, res MergeResult, wt Worktree, opts MergeOptions) (MergeResult, error) {
	src, dst := ms.work.tip, ms.into
	res.Updated, res.Before, res.Head = "refs/heads/"+ms.target, dst, dst
	upToDate, err := m.isAncestor(ctx, ms.repo, src, dst)
	if err != nil {
		return MergeResult{}, err
	}
	if upToDate {
		res.Method, res.Commits = MergeUpToDate, []Commit{}
		m.recordMerged(ctx, ms, wt)
		return res, nil // src is dst's: nothing was committed either
	}
	if res.Commits, res.MoreCommits, err = m.commitsBetween(ctx, ms.repo, dst, src); err != nil {
		return MergeResult{}, err
	}
	ff, err := m.isAncestor(ctx, ms.repo, dst, src)
	if err != nil {
		return MergeResult{}, err
	}
	newTip := src
	res.Method = MergeFastForward
	if !ff || opts.Squash {
		tree := src + "^{tree}"
		if !ff {
			if tree, err = m.mergeTree(ctx, ms.repo, dst, src, ms.work.ref, res.Updated); err != nil {
				return MergeResult{}, err
			}
		}
		msg := []string{fmt.Sprintf("Merge branch '%s' into %s", res.Branch, ms.target)}
		parents := []string{dst, src}
		res.Method = MergeCommit
		if opts.Squash {
			title := opts.Title
			if title == "" {
				title = "agentpool session " + wt.Session
			}
			msg, parents, res.Method = []string{title}, []string{dst}, MergeSquash
		}
		if opts.Summary != "" {
			msg = append(msg, opts.Summary)
		}
		msg = append(msg, trailers(wt))
		if newTip, err = m.commitAs(ctx, ms.repo, tree, parents, msg); err != nil {
			return MergeResult{}, err
		}
	}
	copied, err := m.copiedMerged(ctx, ms.repo, wt.Path, dst, newTip)
	if err != nil {
		return MergeResult{}, err
	}
	if len(copied) > 0 {
		how := "remove it from the branch's history, or merge with squash once it is no longer on the branch"
		if opts.Squash {
			how = "remove it from the branch (git rm --cached, then commit)"
		}
		return MergeResult{}, fmt.Errorf("%w: the session's branch commits %s, copied by the setup from the main checkout, which is never merged: %s; nothing was changed",
			ErrConflict, strings.Join(copied, ", "), how)
	}
	checkout, err := m.checkoutOf(ctx, ms.info, res.Updated)
	if err != nil {
		return MergeResult{}, err
	}
	if checkout != "" {
		if err := m.checkClean(ctx, checkout, dst, newTip); err != nil {
			return MergeResult{}, err
		}
	}
	// Everything is checked: commit the work, then move the target.
	if err := m.applyJoin(ctx, ms.repo, ms.work, "agentpool: commit session work before merging"); err != nil {
		return MergeResult{}, err
	}
	m.resetIndex(ctx, ms)
	if checkout == "" {
		if _, err := m.git(ctx, ms.repo, "update-ref", "-m", "agentpool: merge session "+wt.Session, res.Updated, newTip, dst); err != nil {
			return MergeResult{}, fmt.Errorf("the session's work is on %s, but %s could not be moved: %w", res.Branch, ms.target, err)
		}
	} else {
		if _, err := m.run(ctx, call{at: at(checkout), user: true, args: []string{"merge", "--ff-only", "--no-edit", newTip}}); err != nil {
			return MergeResult{}, fmt.Errorf("the session's work is on %s, but git merge in %s failed: %w", res.Branch, checkout, err)
		}
		res.WorkingTree = checkout
	}
	res.Head = newTip
	m.recordMerged(ctx, ms, wt)
	return res, nil
}

// rebaseLocked brings the session branch (with its work) up to date with
// the target branch, and its worktree with it.
func (m *Manager) rebaseLocked(ctx context.Context, ms mergeState, res MergeResult, wt Worktree) (MergeResult, error) {
	if !ms.onTip {
		return MergeResult{}, fmt.Errorf("%w: the session's worktree is not on its branch %s (its HEAD was moved): nothing was changed", ErrDirty, res.Branch)
	}
	src, dst := ms.into, ms.work.tip
	res.Updated, res.Before, res.Head = ms.work.ref, ms.work.old, dst
	upToDate, err := m.isAncestor(ctx, ms.repo, src, dst)
	if err != nil {
		return MergeResult{}, err
	}
	newTip := dst
	res.Method, res.Commits = MergeUpToDate, []Commit{}
	if !upToDate {
		if res.Commits, res.MoreCommits, err = m.commitsBetween(ctx, ms.repo, dst, src); err != nil {
			return MergeResult{}, err
		}
		ff, err := m.isAncestor(ctx, ms.repo, dst, src)
		if err != nil {
			return MergeResult{}, err
		}
		newTip, res.Method = src, MergeFastForward
		if !ff {
			tree, err := m.mergeTree(ctx, ms.repo, dst, src, "refs/heads/"+ms.target, ms.work.ref)
			if err != nil {
				return MergeResult{}, err
			}
			msg := []string{fmt.Sprintf("Merge branch '%s' into %s", ms.target, res.Branch), trailers(wt)}
			if newTip, err = m.commitAs(ctx, ms.repo, tree, []string{dst, src}, msg); err != nil {
				return MergeResult{}, err
			}
			res.Method = MergeCommit
		}
	}
	if newTip != dst {
		if err := m.switchFiles(ctx, ms.l, dst, newTip); err != nil {
			return MergeResult{}, err
		}
		res.WorkingTree = ms.l.dir
	}
	if newTip != ms.work.old {
		if _, err := m.git(ctx, ms.repo, "update-ref", "-m", "agentpool: bring the session up to date with "+ms.target, ms.work.ref, newTip, ms.work.old); err != nil {
			if newTip != dst {
				// Put the files back as they were.
				if rerr := m.switchFiles(context.WithoutCancel(ctx), ms.l, newTip, dst); rerr != nil {
					m.log.Warn("rebase: put the worktree back", keyPath, ms.l.dir, keyErr, rerr)
				}
			}
			return MergeResult{}, err
		}
	}
	ms.work.tip, ms.work.committed = newTip, newTip != ms.work.old
	m.resetIndex(ctx, ms)
	res.Head = newTip
	return res, nil
}

// switchFiles changes the worktree's files from the tree of commit from
// (its current state) to that of commit to, through a temporary index.
// It changes nothing and fails when the worktree is not in from's state
// or an ignored file is in the way.
func (m *Manager) switchFiles(ctx context.Context, l wtLoc, from, to string) error {
	idx, err := newTempIndex(m.tmpDir, l.admin)
	if err != nil {
		return err
	}
	defer idx.remove()
	cur, err := m.snapshotInto(ctx, l, idx)
	if err != nil {
		return err
	}
	ids, err := m.resolve(ctx, l.repo(), from+"^{tree}", to+"^{tree}")
	if err != nil {
		return err
	}
	if cur != ids[0] {
		return fmt.Errorf("the worktree %s changed while it was being updated: nothing was changed", l.dir)
	}
	out, err := m.run(ctx, call{at: l, args: []string{"diff-tree", "-r", "-z", "--name-status", "--no-renames", cur, ids[1], "--"}})
	if err != nil {
		return err
	}
	changed, err := parseNameStatus(out)
	if err != nil {
		return err
	}
	if err := ignoredInTheWay(l.dir, changed); err != nil {
		return fmt.Errorf("%w: %w; nothing was changed", ErrDirty, err)
	}
	_, err = m.run(ctx, call{at: l, args: []string{"read-tree", "-m", "-u", cur, ids[1]}, env: idx.env()})
	return err
}

// resetIndex makes the worktree's index match the session branch's new
// tip after a commit of its work, so that the agent's git sees no change
// it did not make. The files are not touched. Failures are logged: the
// work is safe on the branch either way.
func (m *Manager) resetIndex(ctx context.Context, ms mergeState) {
	if !ms.live || !ms.onTip || !ms.work.committed {
		return
	}
	if _, err := m.git(ctx, ms.l, "read-tree", "--reset", ms.work.tip); err != nil {
		m.log.Warn("merge: reset the worktree's index", keyPath, ms.l.dir, keyErr, err)
	}
}

// mergeTree computes the merge of commits a and b (named refA and refB in
// messages) without a working tree and returns its tree; a conflict is an
// error wrapping ErrConflict that lists the paths.
func (m *Manager) mergeTree(ctx context.Context, l wtLoc, a, b, refA, refB string) (string, error) {
	out, err := m.run(ctx, call{at: l, args: []string{"merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", a, b}})
	fields := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	switch code := exitCode(err); {
	case err == nil:
		return fields[0], nil
	case code == 1 && len(fields) > 1:
		paths := dedupe(fields[1:])
		return "", fmt.Errorf("%w in %s (between %s and %s); nothing was changed", ErrConflict, strings.Join(paths, ", "),
			strings.TrimPrefix(refA, "refs/heads/"), strings.TrimPrefix(refB, "refs/heads/"))
	case code == 129:
		return "", fmt.Errorf("merging needs git 2.38 or newer (merge-tree --write-tree): %w", err)
	}
	return "", err
}

// dedupe returns ss without repeats, in order.
func dedupe(ss []string) []string {
	seen := map[string]bool{}
	out := ss[:0:0]
	for _, s := range ss {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// checkoutOf returns the user's checkout where ref is checked out, or "".
// A session worktree (under the Manager's root) is refused.
func (m *Manager) checkoutOf(ctx context.Context, info repoInfo, ref string) (string, error) {
	wts, err := m.list(ctx, info.top)
	if err != nil {
		return "", err
	}
	for _, w := range wts {
		if w.Branch != ref {
			continue
		}
		if within(m.root, w.Path) {
			return "", fmt.Errorf("%w: %s is checked out in %s: close that session first, or merge into another branch", ErrBranchInUse,
				strings.TrimPrefix(ref, "refs/heads/"), w.Path)
		}
		return w.Path, nil
	}
	return "", nil
}

// checkClean refuses a checkout with uncommitted changes to tracked files,
// or with files in the way of those that going from commit from to
// commit to adds.
func (m *Manager) checkClean(ctx context.Context, checkout, from, to string) error {
	out, err := m.run(ctx, call{at: at(checkout), args: []string{"status", "--porcelain=v1", "-z", "--untracked-files=no", "--ignore-submodules=none"}})
	if err != nil {
		return err
	}
	var dirty []string
	recs := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	for i := 0; i < len(recs); i++ {
		r := recs[i]
		if len(r) < 4 {
			continue
		}
		dirty = append(dirty, r[3:])
		if r[0] == 'R' || r[0] == 'C' {
			i++ // the source path of a rename or copy
		}
	}
	if len(dirty) > 0 {
		const show = 10
		more := ""
		if len(dirty) > show {
			more = fmt.Sprintf(" and %d more", len(dirty)-show)
			dirty = dirty[:show]
		}
		return fmt.Errorf("%w: %s has uncommitted changes in %s%s: commit or stash them first; nothing was changed",
			ErrDirty, checkout, strings.Join(dirty, ", "), more)
	}
	out, err = m.run(ctx, call{at: at(checkout), args: []string{"diff-tree", "-r", "-z", "--name-status", "--no-renames", from, to, "--"}})
	if err != nil {
		return err
	}
	changed, err := parseNameStatus(out)
	if err != nil {
		return err
	}
	for _, c := range changed {
		if c.status == 'A' && lexists(filepath.Join(checkout, filepath.FromSlash(c.path))) {
			return fmt.Errorf("%w: the merge adds %s, which exists untracked in %s: move it away first; nothing was changed", ErrDirty, c.path, checkout)
		}
	}
	return nil
}
