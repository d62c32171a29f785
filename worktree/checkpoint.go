package worktree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// tempIndex is a private index file for one snapshot: a copy of the
// worktree's index (so stat data, sparse bits and tracked-ness carry over),
// kept in the Manager's own directory, out of the agents' reach.
type tempIndex struct {
	path string
}

// newTempIndex copies the worktree's index at admin/index to a new file in
// dir. The index is opened without following a symlink, which an agent
// could plant to have the Manager copy a file it cannot read.
func newTempIndex(dir, admin string) (*tempIndex, error) {
	f, err := os.CreateTemp(dir, "agentpool-index-*")
	if err != nil {
		return nil, fmt.Errorf("temporary index: %w", err)
	}
	t := &tempIndex{path: f.Name()}
	src, err := os.OpenFile(filepath.Join(admin, "index"), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// No index yet: let git start from an empty one.
		f.Close()
		os.Remove(t.path)
		return t, nil
	case err != nil:
		f.Close()
		t.remove()
		return nil, fmt.Errorf("temporary index: %w", err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		t.remove()
		return nil, fmt.Errorf("temporary index: %s is not a regular file", src.Name())
	}
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		t.remove()
		return nil, fmt.Errorf("temporary index: %w", err)
	}
	if err := f.Close(); err != nil {
		t.remove()
		return nil, fmt.Errorf("temporary index: %w", err)
	}
	// The copy keeps the index's time: git trusts the recorded stat of a
	// file only when the file is older than the index that recorded it
	// ("racily clean" entries are compared by content), so a copy dated
	// now would hide a same-size change made in the second of checkout.
	if err := os.Chtimes(t.path, fi.ModTime(), fi.ModTime()); err != nil {
		t.remove()
		return nil, fmt.Errorf("temporary index: %w", err)
	}
	return t, nil
}

// env points git at the temporary index.
func (t *tempIndex) env() []string { return []string{"GIT_INDEX_FILE=" + t.path} }

// remove deletes the file and any lock git left beside it.
func (t *tempIndex) remove() {
	os.Remove(t.path)
	os.Remove(t.path + ".lock")
}

// snapshotRetries is how many times a snapshot is tried again when a file
// changed under git while it read it.
const snapshotRetries = 2

// snapshotInto adds the whole state of the worktree at dir (tracked and
// untracked files, ignore rules respected, and every .gitignore file even
// where it ignores itself: see hidden.go) to the temporary index, less
// the files a setup copied into it (see copied.go), and writes its tree. HEAD, the real index and the files are not touched. A
// file that shrinks while git reads it ("short read", as when an agent's
// process rewrites it right then) makes git fail: that is tried again.
func (m *Manager) snapshotInto(ctx context.Context, l wtLoc, idx *tempIndex) (string, error) {
	args, env := []string{"add", "--all"}, idx.env()
	left := map[string]bool{} // nested repositories without a commit, left out
	for attempt := 0; ; attempt++ {
		_, err := m.run(ctx, call{at: l, args: args, env: env})
		if err == nil {
			break
		}
		var ge *GitError
		if !errors.As(err, &ge) || ctx.Err() != nil {
			return "", fmt.Errorf("snapshot %s: %w", l.dir, err)
		}
		if attempt < snapshotRetries && strings.Contains(ge.Stderr, "short read") {
			continue
		}
		// A repository made inside the worktree (an agent's `git init`,
		// `cargo new`) with no commit yet cannot be added, not even as a
		// gitlink: it is left out of the checkpoint, as a nested
		// repository's files always are, rather than failing it.
		more := false
		for _, p := range noCommitRepos(ge.Stderr) {
			if !left[p] {
				left[p], more = true, true
			}
		}
		if !more {
			return "", fmt.Errorf("snapshot %s: %w", l.dir, err)
		}
		// Pathspecs are literal unless asked (see git.go): the exclusions
		// need their magic, which keeps each path literal.
		args, env = []string{"add", "--all", "--", "."}, append(idx.env(), "GIT_LITERAL_PATHSPECS=0")
		for p := range left {
			args = append(args, ":(exclude,literal)"+p)
		}
	}
	if err := m.addIgnoreFiles(ctx, l, idx); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", l.dir, err)
	}
	if err := m.leaveOutCopied(ctx, l, idx); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", l.dir, err)
	}
	out, err := m.run(ctx, call{at: l, args: []string{"write-tree"}, env: idx.env()})
	var ge *GitError
	if err != nil && errors.As(err, &ge) && strings.Contains(ge.Stderr, "invalid object") && ctx.Err() == nil {
		if err := m.rehashMissing(ctx, l, idx); err != nil {
			return "", fmt.Errorf("snapshot %s: %w", l.dir, err)
		}
		out, err = m.run(ctx, call{at: l, args: []string{"write-tree"}, env: idx.env()})
	}
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", l.dir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// rehashMissing takes out of the temporary index the entries whose
// object the repository lacks, and adds their files again from the
// worktree. The worktree's index names such objects when the agent's git
// staged a file in its private view (see view.go), or wrote the index
// itself; its file, hashed here, is what the snapshot holds, and its
// blob then joins the repository.
func (m *Manager) rehashMissing(ctx context.Context, l wtLoc, idx *tempIndex) error {
	out, err := m.run(ctx, call{at: l, args: []string{"ls-files", "--stage", "-z"}, env: idx.env()})
	if err != nil {
		return err
	}
	var ids, paths []string
	for _, rec := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		meta, p, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 || f[0] == "160000" {
			continue // a submodule's commit is never in the repository
		}
		ids, paths = append(ids, f[1]), append(paths, p)
	}
	if len(ids) == 0 {
		return nil
	}
	found, err := m.resolve(ctx, l.repo(), ids...)
	if err != nil {
		return err
	}
	var gone, again strings.Builder
	for i, id := range found {
		if id != "" {
			continue
		}
		gone.WriteString(paths[i] + "\x00")
		if lexists(filepath.Join(l.dir, filepath.FromSlash(paths[i]))) {
			again.WriteString(paths[i] + "\x00")
		}
	}
	if gone.Len() == 0 {
		return nil
	}
	rm := call{at: l, args: []string{"update-index", "--force-remove", "-z", "--stdin"}, env: idx.env(), stdin: strings.NewReader(gone.String())}
	if _, err := m.run(ctx, rm); err != nil {
		return err
	}
	if again.Len() == 0 {
		return nil
	}
	// Tracked before, so added even where ignored.
	add := call{at: l, args: []string{"add", "--all", "--force", "--pathspec-from-file=-", "--pathspec-file-nul"}, env: idx.env(), stdin: strings.NewReader(again.String())}
	_, err = m.run(ctx, add)
	return err
}

// noCommitRepos are the paths git add names as nested repositories
// without a commit checked out ("error: 'sub/' does not have a commit
// checked out").
func noCommitRepos(stderr string) []string {
	var out []string
	for _, line := range strings.Split(stderr, "\n") {
		p, ok := strings.CutPrefix(line, "error: '")
		if !ok {
			continue
		}
		if p, ok = strings.CutSuffix(p, "' does not have a commit checked out"); ok && p != "" {
			out = append(out, p)
		}
	}
	return out
}

// snapshot returns the tree of the worktree's current state.
func (m *Manager) snapshot(ctx context.Context, l wtLoc) (string, error) {
	idx, err := newTempIndex(m.tmpDir, l.admin)
	if err != nil {
		return "", err
	}
	defer idx.remove()
	return m.snapshotInto(ctx, l, idx)
}

// Checkpoint records the whole state of the worktree (tracked and untracked
// files, .gitignore respected) and returns its tree id, without touching
// HEAD, the index or any file: it works on a copy of the index through
// GIT_INDEX_FILE. The tree is anchored in a chain of commits at
// CheckpointRefPrefix+session (one commit per distinct state), so git gc
// keeps it and Diff and Restore can use it at any later time. Taking a
// checkpoint of an unchanged worktree returns the same id and adds nothing;
// when the Manager's change tracking saw no change since the last
// checkpoint (see Config.RescanAfter), it does so without running git.
// A missing directory gives an error wrapping ErrMissing.
//
// A setup of the worktree still running (see RunSetup) is waited for
// first, so that the state before a session's first turn holds what the
// setup made, and no turn starts in a half-prepared worktree.
func (m *Manager) Checkpoint(ctx context.Context, wt Worktree) (string, error) {
	if err := ValidSession(wt.Session); err != nil {
		return "", err
	}
	if err := m.WaitSetup(ctx, wt); err != nil {
		return "", err
	}
	if !filepath.IsAbs(wt.Path) {
		return "", fmt.Errorf("worktree path %q is not absolute", wt.Path)
	}
	// Commits the agent made in its private view join the branch first.
	m.importFirst(ctx, wt)
	root := filepath.Clean(wt.Path)
	st := m.state(root)
	st.mu.Lock()
	defer st.mu.Unlock()
	if p := st.paths.Load(); p != nil && p.repo == wt.Repo {
		// A worktree removed or moved since shows in the fingerprint (its
		// index is gone) or in the tracking (its directory is gone).
		fp := m.fingerprintOf(p.AdminDir, p.CommonDir)
		if tree, ok := m.changes.lookup(root, fp); ok {
			if tree == st.seed {
				st.seedGiven = true
			}
			return tree, nil
		}
	}
	l, err := m.open(ctx, wt)
	if err != nil {
		return "", err
	}
	fp := m.fingerprintOf(l.admin, l.common)
	gen, tracked := m.changes.begin(root)
	tree, err := m.snapshot(ctx, l)
	if err != nil {
		return "", fmt.Errorf("checkpoint session %q: %w", wt.Session, err)
	}
	if err := m.anchorLocked(ctx, st, l, wt, tree); err != nil {
		return "", fmt.Errorf("checkpoint session %q: %w", wt.Session, err)
	}
	if tracked {
		m.changes.record(root, gen, tree, fp)
	}
	return tree, nil
}

// anchorLocked appends tree to the session's checkpoint chain unless it is
// already its head. st.mu must be held.
func (m *Manager) anchorLocked(ctx context.Context, st *wtState, l wtLoc, wt Worktree, tree string) error {
	if seed, given := st.seed, st.seedGiven; seed != "" {
		// The state at creation, once given as a checkpoint, goes first,
		// as a scan would have put it.
		st.seed, st.seedGiven = "", false
		if given && seed != tree {
			if err := m.anchorLocked(ctx, st, l, wt, seed); err != nil {
				st.seed, st.seedGiven = seed, given
				return err
			}
		}
	}
	if st.anchor != "" && st.anchorTree == tree {
		return nil
	}
	ref := CheckpointRefPrefix + wt.Session
	for attempt := 0; ; attempt++ {
		if st.anchor == "" || attempt > 0 {
			ids, err := m.resolve(ctx, l.repo(), ref, ref+"^{tree}")
			if err != nil {
				return fmt.Errorf("read %s: %w", ref, err)
			}
			st.anchor, st.anchorTree = ids[0], ids[1]
			if st.anchor != "" && st.anchorTree == tree {
				return nil
			}
		}
		args := []string{"commit-tree", tree, "-m", checkpointTitle, "-m", "Session: " + wt.Session}
		if st.anchor != "" {
			args = append(args, "-p", st.anchor)
		}
		commit, err := m.git(ctx, l.repo(), args...)
		if err != nil {
			return fmt.Errorf("anchor checkpoint: %w", err)
		}
		// Compare-and-swap: "" means the ref must not exist yet.
		_, err = m.git(ctx, l.repo(), "update-ref", "-m", checkpointTitle, ref, commit, st.anchor)
		if err == nil {
			st.anchor, st.anchorTree = commit, tree
			return nil
		}
		if attempt > 0 || ctx.Err() != nil {
			return fmt.Errorf("anchor checkpoint: %w", err)
		}
		// Someone else moved the ref: re-read it and retry once.
	}
}

// anchorSeedLocked anchors the state at creation that Checkpoint gave
// without anchoring it (see seedFresh), if any: before the worktree
// goes, so that its tree outlives the session's branch. st.mu must be
// held.
func (m *Manager) anchorSeedLocked(ctx context.Context, st *wtState, l wtLoc, wt Worktree) error {
	if st.seed == "" || !st.seedGiven {
		return nil
	}
	return m.anchorLocked(ctx, st, l, wt, st.seed)
}

// Restore makes the worktree match checkpoint (a tree id from Checkpoint,
// or any tree-ish such as the base commit): files changed since are put
// back, files added since are removed (and directories left empty by that),
// files deleted since return, modes follow. Ignored files are never touched:
// if a file of the checkpoint would overwrite one, Restore fails and changes
// nothing. HEAD does not move; for each path it changes, the index entry is
// reset to HEAD so that nothing the undone work staged stays staged. The
// state replaced is first anchored in the checkpoint chain, so a restore can
// itself be undone. Errors wrap ErrMissing or ErrUnknownRef.
func (m *Manager) Restore(ctx context.Context, wt Worktree, checkpoint string) error {
	if err := ValidSession(wt.Session); err != nil {
		return err
	}
	if err := validRev(checkpoint); err != nil {
		return err
	}
	// The index is reset to HEAD: the branch, with the agent's commits.
	m.importFirst(ctx, wt)
	return m.restore(ctx, wt, checkpoint)
}

// restore is Restore without the import first, for a caller that holds
// the repository's lock.
func (m *Manager) restore(ctx context.Context, wt Worktree, checkpoint string) error {
	l, err := m.open(ctx, wt)
	if err != nil {
		return err
	}
	st := m.state(wt.Path)
	st.mu.Lock()
	defer st.mu.Unlock()
	ids, err := m.resolve(ctx, l.repo(), checkpoint+"^{tree}")
	if err != nil {
		return fmt.Errorf("restore session %q: %w", wt.Session, err)
	}
	target := ids[0]
	if target == "" {
		return fmt.Errorf("%w: checkpoint %q is not a tree in %s", ErrUnknownRef, checkpoint, wt.Path)
	}
	idx, err := newTempIndex(m.tmpDir, l.admin)
	if err != nil {
		return fmt.Errorf("restore session %q: %w", wt.Session, err)
	}
	defer idx.remove()
	cur, err := m.snapshotInto(ctx, l, idx)
	if err != nil {
		return fmt.Errorf("restore session %q: %w", wt.Session, err)
	}
	if cur == target {
		return nil
	}
	if err := m.anchorLocked(ctx, st, l, wt, cur); err != nil {
		return fmt.Errorf("restore session %q: %w", wt.Session, err)
	}
	out, err := m.run(ctx, call{at: l, args: []string{"diff-tree", "-r", "-z", "--name-status", "--no-renames", cur, target, "--"}})
	if err != nil {
		return fmt.Errorf("restore session %q: %w", wt.Session, err)
	}
	changed, err := parseNameStatus(out)
	if err != nil {
		return fmt.Errorf("restore session %q: %w", wt.Session, err)
	}
	// read-tree treats ignored files as expendable: refuse first.
	if err := ignoredInTheWay(wt.Path, changed); err != nil {
		return fmt.Errorf("restore session %q: %w; nothing was changed", wt.Session, err)
	}
	// The temporary index equals cur and is fresh, so a two-tree read-tree
	// switches exactly the paths that differ.
	if _, err := m.run(ctx, call{at: l, args: []string{"read-tree", "-m", "-u", cur, target}, env: idx.env()}); err != nil {
		return fmt.Errorf("restore session %q: %w", wt.Session, err)
	}
	var paths strings.Builder
	for _, c := range changed {
		paths.WriteString(c.path)
		paths.WriteByte(0)
	}
	// The commit HEAD names, resolved in the real refs (see headOf).
	head, err := m.headOf(ctx, l)
	if err != nil {
		return fmt.Errorf("restore session %q: files restored, index not reset: %w", wt.Session, err)
	}
	reset := []string{"reset", "--quiet"}
	if head != "" {
		reset = append(reset, head)
	}
	if _, err := m.run(ctx, call{
		at:    l,
		args:  append(reset, "--pathspec-from-file=-", "--pathspec-file-nul"),
		stdin: strings.NewReader(paths.String()),
	}); err != nil {
		return fmt.Errorf("restore session %q: files restored, index not reset: %w", wt.Session, err)
	}
	m.log.Info("worktree restored", keySession, wt.Session, keyPath, wt.Path, keyCommit, target)
	return nil
}

// pathChange is one path of `diff-tree --name-status --no-renames`.
type pathChange struct {
	status byte // 'A', 'D', 'M', 'T'
	path   string
}

// parseNameStatus parses the -z form: "status\0path\0" records.
func parseNameStatus(out []byte) ([]pathChange, error) {
	toks := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(toks) == 1 && toks[0] == "" {
		return nil, nil
	}
	if len(toks)%2 != 0 {
		return nil, fmt.Errorf("unexpected diff-tree output %q", out)
	}
	changes := make([]pathChange, 0, len(toks)/2)
	for i := 0; i < len(toks); i += 2 {
		if toks[i] == "" {
			return nil, fmt.Errorf("unexpected diff-tree output %q", out)
		}
		changes = append(changes, pathChange{status: toks[i][0], path: toks[i+1]})
	}
	return changes, nil
}

// ignoredInTheWay finds a file on disk that writing the added paths would
// overwrite. Every non-ignored file is in the current snapshot, so a file
// at an added path, or in place of one of its directories, is an ignored
// one, unless the restore deletes it.
func ignoredInTheWay(dir string, changes []pathChange) error {
	deleted := make(map[string]bool)
	for _, c := range changes {
		if c.status == 'D' {
			deleted[c.path] = true
		}
	}
	for _, c := range changes {
		if c.status != 'A' {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(c.path))); err == nil {
			return fmt.Errorf("restoring %s would overwrite an ignored file or directory", c.path)
		}
		for p := path.Dir(c.path); p != "."; p = path.Dir(p) {
			info, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(p)))
			if err == nil && !info.IsDir() && !deleted[p] {
				return fmt.Errorf("restoring %s would overwrite the ignored file %s", c.path, p)
			}
		}
	}
	return nil
}
