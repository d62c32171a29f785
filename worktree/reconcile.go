package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Report is what Reconcile found. Every item appears in exactly one list.
type Report struct {
	// Present are the known worktrees found on disk and registered in git.
	Present []Worktree
	// Missing are the known worktrees whose directory is gone; Recreate
	// brings each back from its branch.
	Missing []Worktree
	// Unknown are worktrees under the Manager's root that the caller did
	// not know, found on disk, in git's worktree list, or both.
	Unknown []Found
	// Problems are the items that could not be checked or pruned.
	Problems []Problem
}

// Found is a worktree under the root that the caller did not know.
type Found struct {
	// Repo is the top level of the repository it belongs to ("" if none
	// could be found).
	Repo string
	// Path is its directory.
	Path string
	// Session is the directory's name, the session id it was created for.
	Session string
	// Branch is the branch checked out ("" if detached or unknown).
	Branch string
	// Head is the commit checked out, as git records it.
	Head string
	// OnDisk and InGit say where it was found.
	OnDisk bool
	InGit  bool
	// Pruned is true when Reconcile removed it (prune was asked); its work
	// is then on the session branch, whose tip is Commit.
	Pruned bool
	Commit string
	// Note says why an unknown item was left alone.
	Note string
}

// Problem is an item Reconcile could not handle; the others were handled.
type Problem struct {
	Repo    string
	Path    string
	Session string
	Err     error
}

// Reconcile compares what the caller knows (the database's live worktrees)
// with git's worktree lists and the directories under the root, and
// reports each item. Without prune it changes nothing of git's or the
// worktrees', but keeps the Manager's own private git views (see view.go)
// in step: a present worktree without one gets one, and a view whose
// worktree is neither known nor on disk is removed. With prune it
// removes the unknown worktrees under the root as Remove does without
// discard (uncommitted work is first committed to its session branch, which
// is kept), and unregisters unknown registrations whose directory is gone
// (joining a detached HEAD to the session branch first). Worktrees outside
// the root are the user's and are never reported or touched; locked ones
// and directories git does not know are reported and left alone.
//
// Nothing in a worktree is trusted to say which repository it belongs to:
// known worktrees are located from their Repo, unknown ones from the
// namespace directory they are in (named after their repository); a .git
// file, which the agent could rewrite, only suggests candidates that must
// hash to that name. A present worktree whose .git file no longer points at
// its admin directory (or whose admin gitdir file no longer points back)
// is logged and repaired, even without prune; its files are not touched.
//
// One bad item never stops the others: it is reported in Problems. The
// error is non-nil only when ctx ends or the root cannot be read.
func (m *Manager) Reconcile(ctx context.Context, known []Worktree, prune bool) (Report, error) {
	var rep Report
	type group struct {
		info  repoInfo
		known []Worktree
		disk  []string
	}
	groups := make(map[string]*group)
	byNamespace := make(map[string]repoInfo)
	var order []string
	groupOf := func(info repoInfo) *group {
		g, ok := groups[info.common]
		if !ok {
			g = &group{info: info}
			groups[info.common] = g
			order = append(order, info.common)
		}
		byNamespace[m.namespace(info.top)] = info
		return g
	}
	knownPaths := make(map[string]bool, len(known))
	repoErrs := make(map[string]error)
	for _, wt := range known {
		knownPaths[filepath.Clean(wt.Path)] = true
		err, failed := repoErrs[wt.Repo]
		var info repoInfo
		if !failed {
			info, err = m.repo(ctx, wt.Repo)
		}
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		if err != nil {
			repoErrs[wt.Repo] = err
			rep.Problems = append(rep.Problems, Problem{Repo: wt.Repo, Path: wt.Path, Session: wt.Session, Err: err})
			continue
		}
		g := groupOf(info)
		g.known = append(g.known, wt)
	}

	dirs, problems, err := m.scanRoot()
	if err != nil {
		return rep, fmt.Errorf("reconcile: %w", err)
	}
	rep.Problems = append(rep.Problems, problems...)
	for _, p := range dirs {
		if knownPaths[p] {
			continue
		}
		found := Found{Path: p, Session: filepath.Base(p), OnDisk: true}
		info, ok := byNamespace[filepath.Dir(p)]
		if !ok {
			var err error
			if info, err = m.attribute(ctx, p); err != nil {
				if ctx.Err() != nil {
					return rep, ctx.Err()
				}
				found.Note = err.Error()
				rep.Unknown = append(rep.Unknown, found)
				continue
			}
		}
		g := groupOf(info)
		g.disk = append(g.disk, p)
	}

	for _, key := range order {
		g := groups[key]
		m.reconcileRepo(ctx, g.info, g.known, g.disk, knownPaths, prune, &rep)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	// The private git views of known worktrees stay (a missing one's is
	// re-used by Recreate, or imported from by Remove); so do those of
	// worktrees on disk. The rest belong to no worktree.
	keep := make(map[string]bool, len(known))
	for _, wt := range known {
		if filepath.IsAbs(wt.Path) {
			keep[m.viewDir(wt.Path)] = true
		}
	}
	rep.Problems = append(rep.Problems, m.sweepViews(keep)...)
	m.log.Info("worktrees reconciled", "present", len(rep.Present), "missing", len(rep.Missing),
		"unknown", len(rep.Unknown), "problems", len(rep.Problems), "prune", prune)
	return rep, nil
}

// reconcileRepo handles the items of one repository under its lock.
func (m *Manager) reconcileRepo(ctx context.Context, info repoInfo, known []Worktree, disk []string, knownPaths map[string]bool, prune bool, rep *Report) {
	lock := m.repoLock(info.common)
	lock.Lock()
	defer lock.Unlock()
	wts, err := m.list(ctx, info.top)
	if err != nil {
		for _, wt := range known {
			rep.Problems = append(rep.Problems, Problem{Repo: info.top, Path: wt.Path, Session: wt.Session, Err: err})
		}
		for _, p := range disk {
			rep.Unknown = append(rep.Unknown, Found{Repo: info.top, Path: p, Session: filepath.Base(p), OnDisk: true, Note: err.Error()})
		}
		return
	}
	inGit := make(map[string]gitWorktree, len(wts))
	for i, w := range wts {
		if i > 0 && !w.Bare {
			inGit[filepath.Clean(w.Path)] = w
		}
	}

	for _, wt := range known {
		p := filepath.Clean(wt.Path)
		_, statErr := os.Lstat(p)
		_, registered := inGit[p]
		switch {
		case errors.Is(statErr, os.ErrNotExist):
			rep.Missing = append(rep.Missing, wt)
		case statErr != nil:
			rep.Problems = append(rep.Problems, Problem{Repo: info.top, Path: wt.Path, Session: wt.Session, Err: statErr})
		case !registered:
			rep.Problems = append(rep.Problems, Problem{Repo: info.top, Path: wt.Path, Session: wt.Session,
				Err: fmt.Errorf("%s exists but git does not know it as a worktree of %s", wt.Path, info.top)})
		default:
			l, err := m.open(ctx, wt)
			if err == nil {
				_, err = m.repairLinks(l, wt.Session)
			}
			if err == nil {
				err = m.ensureViewLocked(ctx, info, wt)
			}
			if err != nil {
				rep.Problems = append(rep.Problems, Problem{Repo: info.top, Path: wt.Path, Session: wt.Session, Err: err})
				continue
			}
			rep.Present = append(rep.Present, wt)
		}
	}

	seen := make(map[string]bool)
	for _, w := range wts[1:] {
		p := filepath.Clean(w.Path)
		if w.Bare || knownPaths[p] || !within(m.root, p) {
			continue // known, or the user's own worktree
		}
		seen[p] = true
		_, statErr := os.Lstat(p)
		f := Found{Repo: info.top, Path: p, Session: filepath.Base(p), Head: w.Head, InGit: true, OnDisk: statErr == nil}
		f.Branch = strings.TrimPrefix(w.Branch, "refs/heads/")
		if prune {
			m.pruneLocked(ctx, info, &f, w, rep)
		}
		rep.Unknown = append(rep.Unknown, f)
	}
	for _, p := range disk {
		if !seen[p] {
			rep.Unknown = append(rep.Unknown, Found{Repo: info.top, Path: p, Session: filepath.Base(p), OnDisk: true,
				Note: "git does not list it as a worktree; left in place"})
		}
	}
}

// pruneLocked removes an unknown worktree without losing its work.
func (m *Manager) pruneLocked(ctx context.Context, info repoInfo, f *Found, w gitWorktree, rep *Report) {
	if w.Locked {
		f.Note = "locked; left in place"
		return
	}
	if err := ValidSession(f.Session); err != nil {
		f.Note = "directory name is not a session id; left in place"
		return
	}
	wt := Worktree{Session: f.Session, Repo: info.top, Path: f.Path, Branch: BranchPrefix + f.Session}
	if strings.HasPrefix(f.Branch, BranchPrefix) {
		wt.Branch = f.Branch
	}
	res, err := m.removeLocked(ctx, info, wt, false)
	if err != nil {
		rep.Problems = append(rep.Problems, Problem{Repo: info.top, Path: f.Path, Session: f.Session, Err: err})
		return
	}
	f.Pruned, f.Commit = true, res.Commit
	if f.Branch == "" || !strings.HasPrefix(f.Branch, BranchPrefix) {
		f.Note = "work joined to " + wt.Branch
	}
}

// scanRoot lists the candidate worktree directories <root>/<namespace>/<x>;
// a namespace that cannot be read is a problem, an unreadable root an error.
func (m *Manager) scanRoot() ([]string, []Problem, error) {
	nss, err := os.ReadDir(m.root)
	if err != nil {
		return nil, nil, err
	}
	var dirs []string
	var problems []Problem
	for _, ns := range nss {
		if !ns.IsDir() || ns.Name() == hooksDirName || ns.Name() == tmpDirName || ns.Name() == copiedDirName || ns.Name() == viewsDirName {
			continue
		}
		dir := filepath.Join(m.root, ns.Name())
		ents, err := os.ReadDir(dir)
		if err != nil {
			problems = append(problems, Problem{Path: dir, Err: err})
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				dirs = append(dirs, filepath.Join(m.root, ns.Name(), e.Name()))
			}
		}
	}
	sort.Strings(dirs)
	return dirs, problems, nil
}

// maxCandidates bounds the entries of a suggested worktrees directory read
// while attributing a worktree.
const maxCandidates = 4096

// attribute finds the repository of the worktree directory p, which lies
// in no namespace of a repository already known. Its .git file suggests a
// common git directory and the top levels of that repository's checkouts;
// the one whose namespace is p's directory (a name only the daemon chose,
// as a hash of the top level) is the repository, and git is asked only
// there, never in a directory the .git file names.
func (m *Manager) attribute(ctx context.Context, p string) (repoInfo, error) {
	content, err := readGitFile(filepath.Join(p, ".git"))
	if err != nil {
		return repoInfo{}, fmt.Errorf("not a linked git worktree: %w", err)
	}
	gitdir := gitdirOf(content, p)
	if !strings.HasPrefix(content, "gitdir: ") || filepath.Base(filepath.Dir(gitdir)) != "worktrees" {
		return repoInfo{}, fmt.Errorf("not a linked git worktree (.git says %q)", content)
	}
	common := filepath.Dir(filepath.Dir(gitdir))
	var tops []string
	if filepath.Base(common) == ".git" {
		tops = append(tops, filepath.Dir(common))
	}
	if d, err := os.Open(filepath.Join(common, "worktrees")); err == nil {
		ents, _ := d.ReadDir(maxCandidates)
		d.Close()
		for _, e := range ents {
			admin := filepath.Join(common, "worktrees", e.Name())
			if g, err := readGitFile(filepath.Join(admin, "gitdir")); err == nil {
				tops = append(tops, filepath.Dir(gitdirOf(g, admin)))
			}
		}
	}
	ns := filepath.Dir(p)
	for _, top := range tops {
		if m.namespace(top) != ns {
			continue
		}
		info, err := m.repo(ctx, top)
		if err != nil {
			return repoInfo{}, err
		}
		if info.top != top {
			break
		}
		return info, nil
	}
	return repoInfo{}, errors.New("cannot tell which repository it belongs to without trusting its .git file; left in place")
}
