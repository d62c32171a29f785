package worktree

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// viewT returns wt's view as GitPaths gives it, failing the test without
// one.
func viewT(t *testing.T, m *Manager, wt Worktree) GitView {
	t.Helper()
	p, err := m.GitPaths(context.Background(), wt)
	if err != nil {
		t.Fatalf("GitPaths(%s) error = %v", wt.Session, err)
	}
	if !p.View.Set() {
		t.Fatalf("GitPaths(%s).View is zero; want the worktree's view", wt.Session)
	}
	return p.View
}

// refsIn lists the refs directory of a view.
func refsIn(t *testing.T, v GitView) []string {
	t.Helper()
	ents, err := os.ReadDir(v.Refs)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestViewMadeAndRemovedWithWorktree(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	for _, discard := range []bool{false, true} {
		wt := create(t, m, "s", repo)
		v := viewT(t, m, wt)
		if want := filepath.Join(m.Root(), ".gitviews", filepath.Base(filepath.Dir(wt.Path)), "s"); v.Dir != want {
			t.Errorf("View.Dir = %s; want %s, beside the worktree and outside it", v.Dir, want)
		}
		if fi, err := os.Stat(v.Dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("view directory: %v, %v; want mode 0700", fi, err)
		}
		for _, d := range []string{v.ObjectsUpper, v.ObjectsWork, v.Refs, v.Logs} {
			if ents, err := os.ReadDir(d); err != nil || (d != v.Refs && len(ents) > 0) {
				t.Errorf("view part %s: %v, %v; want an empty directory", d, ents, err)
			}
		}
		if got := refsIn(t, v); !slices.Equal(got, []string{"s"}) {
			t.Errorf("view refs = %v; want the branch's leaf alone", got)
		}
		if got := readFile(t, v.Refs, "s"); got != wt.BaseCommit+"\n" {
			t.Errorf("private ref = %q; want the branch's tip %s", got, wt.BaseCommit)
		}
		p := gitPathsT(t, wt)
		for _, d := range []string{p.RefDir(), p.LogDir()} {
			if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
				t.Errorf("mount point %s: %v", d, err)
			}
		}
		if _, err := m.Remove(ctx, wt, discard); err != nil {
			t.Fatal(err)
		}
		if exists(v.Dir) || exists(filepath.Dir(v.Dir)) {
			t.Errorf("Remove(discard=%t) left the view %s", discard, v.Dir)
		}
	}
}

// TestViewOwnBranchOnly: the agent of one session cannot move another
// session's branch through its view: its ref directory holds its own
// branch's ref, and whatever else it writes there is never read.
func TestViewOwnBranchOnly(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	s1, s2 := create(t, m, "s1", repo), create(t, m, "s2", repo)
	a := newAgent(t, m, s1)
	if a.overlay {
		if out, err := a.try(`git rev-parse --verify -q refs/heads/agentpool/s2`); err == nil {
			t.Errorf("the agent of s1 sees agentpool/s2 (%s); want only its own branch in its ref directory", out)
		}
	}
	c := a.commit("mine", map[string]string{"x.txt": "x\n"})
	if a.overlay {
		a.sh(`git update-ref refs/heads/agentpool/s2 "$ID"`, "ID="+c)
	} else {
		writeFile(t, a.p.View.Refs, "s2", c+"\n")
	}
	for _, wt := range []Worktree{s1, s2} {
		if _, err := m.Checkpoint(ctx, wt); err != nil {
			t.Fatal(err)
		}
		importT(t, m, wt)
	}
	if got := gitT(t, repo, "rev-parse", "agentpool/s2"); got != s2.BaseCommit {
		t.Errorf("agentpool/s2 = %s; want %s: the agent of s1 moved it (agent as %s)", got, s2.BaseCommit, a.mode())
	}
	if got := gitT(t, repo, "rev-parse", "agentpool/s1"); got != c {
		t.Errorf("agentpool/s1 = %s; want the agent's own commit %s", got, c)
	}
	if got := readFile(t, viewT(t, m, s2).Refs, "s2"); got != s2.BaseCommit+"\n" {
		t.Errorf("s2's private ref = %q; want its base", got)
	}
}

func TestReconcileViews(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	kept, lost := create(t, m, "kept", repo), create(t, m, "lost", repo)
	vKept, vLost := viewT(t, m, kept), viewT(t, m, lost)
	// A worktree made before views: Reconcile makes its view.
	must(t, os.RemoveAll(vKept.Dir))
	// A view whose worktree is gone and unknown: Reconcile removes it.
	ghost := filepath.Join(filepath.Dir(vKept.Dir), "ghost")
	writeFile(t, ghost, "refs/ghost", kept.BaseCommit+"\n")
	// The agent of a worktree whose directory is then lost committed in
	// its view: the view stays for Recreate, which imports it.
	c := newAgent(t, m, lost).commit("before the loss", map[string]string{"l.txt": "l\n"})
	must(t, os.RemoveAll(lost.Path))

	for _, mm := range []*Manager{m, restarted(t, m)} {
		rep, err := mm.Reconcile(ctx, []Worktree{kept, lost}, false)
		if err != nil || len(rep.Problems) > 0 {
			t.Fatalf("Reconcile() = %+v, %v", rep, err)
		}
		if got := readFile(t, vKept.Refs, "kept"); got != kept.BaseCommit+"\n" {
			t.Errorf("re-made private ref = %q; want the branch's tip", got)
		}
		if exists(ghost) {
			t.Errorf("Reconcile() left the view %s of no worktree", ghost)
		}
		if got := readFile(t, vLost.Refs, "lost"); got != c+"\n" {
			t.Errorf("the lost worktree's private ref = %q; want the agent's %s kept", got, c)
		}
	}
	wt, err := m.Recreate(ctx, lost)
	if err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, repo, "rev-parse", "agentpool/lost"); got != c {
		t.Errorf("after Recreate, agentpool/lost = %s; want the agent's commit %s imported", got, c)
	}
	if got := readFile(t, wt.Path, "l.txt"); got != "l\n" {
		t.Errorf("re-created worktree's l.txt = %q; want the agent's commit checked out", got)
	}
	if got := readFile(t, vLost.Refs, "lost"); got != c+"\n" {
		t.Errorf("after Recreate, the private ref = %q; want the branch's tip %s", got, c)
	}
	noImportLeftovers(t, newAgent(t, m, wt))
}

// TestRemoveImportsAgentCommits: closing a session never loses what its
// agent committed in its view, even when no checkpoint imported it.
func TestRemoveImportsAgentCommits(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	a := newAgent(t, m, wt)
	c := a.commit("agent", map[string]string{"a.txt": "a\n"})
	writeFile(t, wt.Path, "left.txt", "not committed\n")
	res, err := m.Remove(ctx, wt, false)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Committed {
		t.Errorf("Remove() = %+v; want the leftover file committed", res)
	}
	gitT(t, repo, "merge-base", "--is-ancestor", c, "agentpool/s")
	if got := gitT(t, repo, "show", "agentpool/s:a.txt"); got != "a" {
		t.Errorf("a.txt on the branch = %q; want the agent's", got)
	}
	if exists(a.p.View.Dir) {
		t.Errorf("Remove() left the view")
	}
	// A view a removal could not delete goes with Prune, after its
	// commits are imported.
	v := m.viewFor(wt.Path, wt.Branch)
	writeFile(t, v.Refs, "s", c+"\n")
	if _, err := m.Prune(ctx, wt, PruneOptions{}); err != nil {
		t.Fatal(err)
	}
	if exists(v.Dir) {
		t.Errorf("Prune() left the view %s", v.Dir)
	}
}

// TestExportAfterCommitWork: the commit the daemon makes of the work left
// in the worktree moves the branch, and the agent's view follows.
func TestExportAfterCommitWork(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	a := newAgent(t, m, wt)
	c := a.commit("agent", map[string]string{"a.txt": "a\n"})
	writeFile(t, wt.Path, "b.txt", "b\n")
	tip, committed, err := m.CommitWork(ctx, wt, "the rest")
	if err != nil || !committed {
		t.Fatalf("CommitWork() = %s, %t, %v", tip, committed, err)
	}
	gitT(t, repo, "merge-base", "--is-ancestor", c, tip)
	if got := a.ref(); got != tip {
		t.Errorf("private ref after CommitWork = %s; want the new tip %s", got, tip)
	}
	if a.overlay {
		if got := strings.TrimSpace(a.sh(`git rev-parse HEAD; git status --porcelain`)); got != tip {
			t.Errorf("the agent's view after CommitWork: %q; want HEAD at %s and nothing to commit", got, tip)
		}
	}
	// Bringing the branch up to date with main moves it too.
	gitT(t, repo, "commit", "-q", "--allow-empty", "-m", "on main")
	res, err := m.Merge(ctx, wt, MergeOptions{Into: "main", Rebase: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.ref(); got != res.Head || res.Head == tip {
		t.Errorf("private ref after the rebase = %s; want the branch's new tip %s", got, res.Head)
	}
}

// TestExportLeavesAgentsMove: the daemon never overwrites a private ref
// the agent moved since the daemon last read it, nor one whose lock the
// agent's git holds; a lock left by a killed agent is broken.
func TestExportLeavesAgentsMove(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	info, err := m.repo(ctx, repo)
	must(t, err)
	v := viewT(t, m, wt)
	gitT(t, repo, "commit", "-q", "--allow-empty", "-m", "moved")
	moved := gitT(t, repo, "rev-parse", "HEAD")
	gitT(t, repo, "update-ref", "refs/heads/agentpool/s", moved)
	st := m.state(wt.Path)

	writeFile(t, v.Refs, "s", "1111111111111111111111111111111111111111\n")
	st.mu.Lock()
	m.exportLocked(ctx, info, wt, st, wt.BaseCommit)
	st.mu.Unlock()
	if got := readFile(t, v.Refs, "s"); got != "1111111111111111111111111111111111111111\n" {
		t.Errorf("export over the agent's move wrote %q", got)
	}

	writeFile(t, v.Refs, "s", wt.BaseCommit+"\n")
	st.viewRef = wt.BaseCommit
	writeFile(t, v.Refs, "s.lock", "")
	if err := writePrivateRef(v, moved, wt.BaseCommit, true); err != errViewBusy {
		t.Errorf("writePrivateRef() with the agent's lock = %v; want errViewBusy", err)
	}
	old := time.Now().Add(-2 * staleRefLock)
	must(t, os.Chtimes(filepath.Join(v.Refs, "s.lock"), old, old))
	st.mu.Lock()
	m.exportLocked(ctx, info, wt, st, wt.BaseCommit)
	st.mu.Unlock()
	if got := readFile(t, v.Refs, "s"); got != moved+"\n" {
		t.Errorf("export past a stale lock wrote %q; want %s", got, moved)
	}
	if exists(filepath.Join(v.Refs, "s.lock")) {
		t.Errorf("export left the lock")
	}
}

// TestNoViewMounted: where the launcher mounts no view, the agent's git
// writes the repository's store and branch itself; its private ref stays
// behind the branch, and importing is a quiet no-op.
func TestNoViewMounted(t *testing.T) {
	ctx := context.Background()
	var logs lockedBuffer
	m, err := NewManager(Config{Root: filepath.Join(t.TempDir(), "worktrees"), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	must(t, err)
	t.Cleanup(func() { m.Close() })
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	for i := range 2 {
		writeFile(t, wt.Path, "f.txt", strings.Repeat("v", i+1)+"\n")
		gitT(t, wt.Path, "add", "-A")
		gitT(t, wt.Path, "commit", "-q", "-m", "agent without a view")
		c := gitT(t, wt.Path, "rev-parse", "HEAD")
		if _, err := m.Checkpoint(ctx, wt); err != nil {
			t.Fatal(err)
		}
		res := importT(t, m, wt)
		if res.Imported || res.Refused != "" || res.After != c {
			t.Errorf("ImportAgentHistory() = %+v; want nothing done, the branch at the agent's %s", res, c)
		}
	}
	if _, _, err := m.CommitWork(ctx, wt, "nothing"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "not imported") {
		t.Errorf("logs speak of a refused import:\n%s", logs.String())
	}
}

// TestCheckpointStagedInView: a file the agent's git staged in its view
// (its blob in the view alone, named by the worktree's index) is hashed
// again by the checkpoint, which then holds it, and the user's git gc,
// which walks every worktree's index, finds the blob in the repository.
func TestCheckpointStagedInView(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	a := newAgent(t, m, wt)
	writeFile(t, wt.Path, "staged.txt", "staged\n")
	// Older than the index that records it, as a checkpoint taken a turn
	// later finds it: git then trusts the entry instead of hashing again.
	old := time.Now().Add(-time.Minute)
	must(t, os.Chtimes(filepath.Join(wt.Path, "staged.txt"), old, old))
	a.sh(`git add staged.txt`)
	blob := strings.TrimSpace(a.sh(`git rev-parse :staged.txt`))
	if _, err := gitRaw(repo, nil, "cat-file", "-e", blob); err == nil {
		t.Fatalf("the repository has the staged blob before the checkpoint; want it in the view only (agent as %s)", a.mode())
	}
	tree, err := m.Checkpoint(ctx, wt)
	if err != nil {
		t.Fatalf("Checkpoint() error = %v", err)
	}
	if got := gitT(t, repo, "show", tree+":staged.txt"); got != "staged" {
		t.Errorf("staged.txt in the checkpoint = %q", got)
	}
	gcWorks(t, repo)
}

// TestCheckpointWithViewRunsNoGit: the import's check on an unchanged
// worktree reads the private ref's file and runs no git.
func TestCheckpointWithViewRunsNoGit(t *testing.T) {
	m := newManager(t)
	wt := create(t, m, "s", newRepo(t, "repo", nil))
	checkpointT(t, m, wt)
	if _, ran := checkpointT(t, m, wt); ran {
		t.Errorf("Checkpoint() of an unchanged worktree with a view ran git")
	}
}

// TestExportSeenByLiveView: what the daemon adds to the repository while
// an agent's view is mounted reaches the agent's git even where its
// overlay remembers a lookup that found nothing (overlayfs keeps such
// negative entries of its lower layer): the commit the view's branch
// moves to, and what it needs, come in a pack of a new name.
func TestExportSeenByLiveView(t *testing.T) {
	if !overlayWorks() {
		t.Skip("no unprivileged overlay mount here")
	}
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	a := newAgent(t, m, wt)
	dir := t.TempDir()
	ready, goOn := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
	cmd := a.command(`for i in $(seq 0 255); do test -e "$COMMON/objects/$(printf %02x $i)/0" || true; done
touch "$READY"
while [ ! -e "$GO" ]; do sleep 0.05; done
git log -1 --format=%H "$(cat "$REF")"
git show "$(cat "$REF"):b.txt"`, "READY="+ready, "GO="+goOn)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for !exists(ready) {
		select {
		case err := <-done:
			t.Fatalf("the agent's view ended early: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	writeFile(t, wt.Path, "b.txt", "from the daemon's commit\n")
	tip, committed, err := m.CommitWork(ctx, wt, "work")
	if err != nil || !committed {
		t.Fatalf("CommitWork() = %s, %t, %v", tip, committed, err)
	}
	writeFile(t, dir, "go", "")
	if err := <-done; err != nil || out.String() != tip+"\nfrom the daemon's commit\n" {
		t.Errorf("the agent's live view after CommitWork: %v\n%s\nwant the new tip %s and its file", err, out.String(), tip)
	}
}

// TestGitPathsMakesMountPoints: git removes the session branches' ref
// directory once their refs are packed; GitPaths makes it again for the
// view to be mounted on.
func TestGitPathsMakesMountPoints(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	gitT(t, repo, "pack-refs", "--all", "--prune")
	p := gitPathsT(t, wt)
	must(t, os.RemoveAll(p.RefDir()))
	got, err := m.GitPaths(context.Background(), wt)
	must(t, err)
	if fi, err := os.Stat(got.RefDir()); err != nil || !fi.IsDir() || !got.View.Set() {
		t.Errorf("GitPaths() = %+v; RefDir: %v; want the view and its mount point", got, err)
	}
}
