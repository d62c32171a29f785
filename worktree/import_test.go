package worktree

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// noImportLeftovers fails the test if an import left its source
// repository in the view or a quarantine in the object store.
func noImportLeftovers(t *testing.T, a *agent) {
	t.Helper()
	if left := globNames(a.p.View.Dir, ".import-"); len(left) > 0 {
		t.Errorf("import left %v in the view %s", left, a.p.View.Dir)
	}
	if left := globNames(filepath.Join(a.p.CommonDir, "objects"), quarantinePrefix); len(left) > 0 {
		t.Errorf("import left %v in the object store", left)
	}
}

// fsckClean fails the test if git fsck (with args) finds anything wrong
// in repo.
func fsckClean(t *testing.T, repo string, args ...string) {
	t.Helper()
	if out, err := gitRaw(repo, nil, append([]string{"fsck", "--strict", "--no-dangling"}, args...)...); err != nil || strings.Contains(out, "error") {
		t.Errorf("git fsck in %s: %v\n%s", repo, err, out)
	}
}

// gcWorks fails the test if the user's git gc fails in repo: it walks
// every worktree's index and HEAD reflog, which the agent's git writes.
func gcWorks(t *testing.T, repo string) {
	t.Helper()
	if out, err := gitRaw(repo, nil, "gc", "--quiet"); err != nil {
		t.Errorf("git gc in %s: %v\n%s", repo, err, out)
	}
}

// importT runs ImportAgentHistory or fails the test.
func importT(t *testing.T, m *Manager, wt Worktree) ImportResult {
	t.Helper()
	res, err := m.ImportAgentHistory(context.Background(), wt)
	if err != nil {
		t.Fatalf("ImportAgentHistory(%s) error = %v", wt.Session, err)
	}
	return res
}

func TestImportAgentCommit(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	a := newAgent(t, m, wt)
	c := a.commit("agent work", map[string]string{"a.txt": "from the agent\n"})
	if got := gitT(t, repo, "rev-parse", "agentpool/s"); got != wt.BaseCommit {
		t.Fatalf("before the import, agentpool/s = %s; want the base %s (the agent writes its view only)", got, wt.BaseCommit)
	}
	if out, err := gitRaw(repo, nil, "cat-file", "-e", c); err == nil {
		t.Fatalf("before the import, the repository has the agent's commit %s; want it in the view only\n%s", c, out)
	}
	res := importT(t, m, wt)
	want := ImportResult{Branch: "agentpool/s", Private: c, Before: wt.BaseCommit, After: c, Imported: true, Commits: 1}
	if res != want {
		t.Errorf("ImportAgentHistory() = %+v; want %+v (agent as %s)", res, want, a.mode())
	}
	if got := gitT(t, repo, "rev-parse", "agentpool/s"); got != c {
		t.Errorf("agentpool/s = %s; want the agent's commit %s", got, c)
	}
	if got := gitT(t, repo, "show", "agentpool/s:a.txt"); got != "from the agent" {
		t.Errorf("a.txt on the branch = %q; want the agent's", got)
	}
	if got := gitT(t, repo, "reflog", "-1", "--format=%gs", "agentpool/s"); got != "agentpool: import the agent's commits" {
		t.Errorf("the branch's reflog says %q; want the import", got)
	}
	// Again: nothing more to do.
	if res := importT(t, m, wt); res.Imported || res.Refused != "" {
		t.Errorf("ImportAgentHistory() again = %+v; want nothing done", res)
	}
	fsckClean(t, repo)
	noImportLeftovers(t, a)
}

// TestImportAutoCommits: an agent that commits on its own (aider) makes
// several commits in a turn; the checkpoint after the turn brings them
// all in, and keeps them in the branch's history.
func TestImportAutoCommits(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	if _, err := m.Checkpoint(ctx, wt); err != nil {
		t.Fatal(err)
	}
	a := newAgent(t, m, wt)
	var commits []string
	for i, f := range []string{"one.txt", "two.txt", "three.txt"} {
		commits = append(commits, a.commit("aider: step "+f, map[string]string{f: strings.Repeat("x", i+1) + "\n"}))
	}
	if _, err := m.Checkpoint(ctx, wt); err != nil {
		t.Fatalf("Checkpoint() error = %v", err)
	}
	log := gitT(t, repo, "log", "--format=%H", "agentpool/s")
	for _, c := range commits {
		if !strings.Contains(log, c) {
			t.Errorf("agentpool/s history lacks the agent's commit %s after the checkpoint (agent as %s):\n%s", c, a.mode(), log)
		}
	}
	if got := gitT(t, repo, "rev-parse", "agentpool/s"); got != commits[2] {
		t.Errorf("agentpool/s = %s; want the agent's last commit %s", got, commits[2])
	}
	// The checkpoint after the turn holds its files, and the branch's
	// tree is the worktree's: the turn's diff against the branch is empty.
	d, err := m.Diff(ctx, wt, "agentpool/s", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != 0 {
		t.Errorf("Diff(branch, live) = %+v; want no change", d.Files)
	}
	noImportLeftovers(t, a)
}

// TestImportRewrittenObject: the attack the views close. The agent puts
// new content under the id of the base commit's README.md blob, and
// commits something else. Its commit is imported; the rewritten object
// never is: the user's checkout, the branch and a new session's
// worktree all show the genuine file, and fsck finds nothing.
func TestImportRewrittenObject(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	readme := gitT(t, repo, "rev-parse", "HEAD:README.md")
	a := newAgent(t, m, wt)
	a.rewrite(readme, "evil\n")
	c := a.commit("unrelated", map[string]string{"b.txt": "b\n"})
	res := importT(t, m, wt)
	if !res.Imported || res.After != c {
		t.Fatalf("ImportAgentHistory() = %+v; want the agent's commit %s imported (agent as %s)", res, c, a.mode())
	}
	for _, rev := range []string{"HEAD:README.md", "agentpool/s:README.md", readme} {
		if got := gitT(t, repo, "cat-file", "-p", rev); got != "hello" {
			t.Errorf("git cat-file -p %s in the main checkout = %q; want the genuine %q", rev, got, "hello")
		}
	}
	other := create(t, m, "other", repo)
	if got := readFile(t, other.Path, "README.md"); got != "hello\n" {
		t.Errorf("a new session's README.md = %q; want the genuine file", got)
	}
	fsckClean(t, repo)
	noImportLeftovers(t, a)
}

// TestImportCommitNamingRewrittenBlob: the agent rewrites README.md's
// blob, then commits a tree that names it (it changes README.md and
// changes it back, which in its view checks out the rewritten text). The
// commit is imported with the genuine blob only: the repository has the
// blob's id, so the fetch never sends the agent's bytes, and the id in
// the commit's tree is the genuine content's. What the agent wrote to the
// file is in the worktree, so the checkpoint and the diff show it.
func TestImportCommitNamingRewrittenBlob(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	readme := gitT(t, repo, "rev-parse", "HEAD:README.md")
	a := newAgent(t, m, wt)
	a.rewrite(readme, "evil\n")
	a.commit("change README", map[string]string{"README.md": "v2\n"})
	a.commitIndex("change it back", `git checkout "$HEAD~1" -- README.md`)
	c := a.ref()
	if got := readFile(t, wt.Path, "README.md"); got != "evil\n" {
		t.Fatalf("README.md in the worktree = %q; want the rewritten text the agent's view checked out", got)
	}
	res := importT(t, m, wt)
	if !res.Imported || res.After != c || res.Commits != 2 {
		t.Fatalf("ImportAgentHistory() = %+v; want the agent's 2 commits up to %s (agent as %s)", res, c, a.mode())
	}
	if got := gitT(t, repo, "rev-parse", "agentpool/s:README.md"); got != readme {
		t.Errorf("README.md on the branch is %s; want the blob id the agent's tree names, %s", got, readme)
	}
	if got := gitT(t, repo, "show", "agentpool/s:README.md"); got != "hello" {
		t.Errorf("README.md on the branch = %q; want the genuine %q", got, "hello")
	}
	fsckClean(t, repo)
	d, err := m.Diff(ctx, wt, "agentpool/s", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != 1 || d.Files[0].Path != "README.md" || !strings.Contains(d.Patch, "+evil") {
		t.Errorf("Diff(branch, live) = %+v\n%s; want README.md changed to the agent's text", d.Files, d.Patch)
	}
	noImportLeftovers(t, a)
}

// TestImportForgedObjectRefused: an object the agent added under an id
// that is not its content's (a new blob rewritten after its commit) makes
// the import fail verification: the branch stays, and nothing of it
// enters the object store.
func TestImportForgedObjectRefused(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	a := newAgent(t, m, wt)
	c := a.commit("add forged", map[string]string{"forged.txt": "original\n"})
	blob := a.sh(`git rev-parse "$HEAD:forged.txt"`)
	blob = strings.TrimSpace(blob)
	a.rewrite(blob, "other\n")
	res := importT(t, m, wt)
	if res.Imported || res.Refused != RefusedUnverified {
		t.Fatalf("ImportAgentHistory() = %+v; want refused: %s (agent as %s)", res, RefusedUnverified, a.mode())
	}
	if got := gitT(t, repo, "rev-parse", "agentpool/s"); got != wt.BaseCommit {
		t.Errorf("agentpool/s = %s; want the base %s kept", got, wt.BaseCommit)
	}
	for _, id := range []string{c, blob} {
		if _, err := gitRaw(repo, nil, "cat-file", "-e", id); err == nil {
			t.Errorf("the object store has %s after a refused import", id)
		}
	}
	// The worktree's HEAD reflog, the agent's to write, names its commit.
	fsckClean(t, repo, "--no-reflogs")
	noImportLeftovers(t, a)
}

// TestImportNonFastForwardRefused: the agent amends a commit already
// imported. The branch keeps what it had; the amended content reaches the
// checkpoint chain, and Remove keeps it on the branch (with its own
// commit on top of what was imported).
func TestImportNonFastForwardRefused(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	a := newAgent(t, m, wt)
	first := a.commit("first", map[string]string{"a.txt": "1\n"})
	if res := importT(t, m, wt); !res.Imported {
		t.Fatalf("ImportAgentHistory() = %+v; want imported", res)
	}
	a.setRef(wt.BaseCommit)
	amended := a.commit("first, amended", map[string]string{"a.txt": "1 amended\n"})
	res := importT(t, m, wt)
	if res.Imported || res.Refused != RefusedNotFastForward || res.After != first {
		t.Fatalf("ImportAgentHistory() = %+v; want refused: %s, the branch at %s (agent as %s)", res, RefusedNotFastForward, first, a.mode())
	}
	if got := gitT(t, repo, "rev-parse", "agentpool/s"); got != first {
		t.Errorf("agentpool/s = %s; want %s kept", got, first)
	}
	if res.Private != amended {
		t.Errorf("ImportAgentHistory().Private = %s; want the amended commit %s", res.Private, amended)
	}
	// Verified, the refused commit is in the store, which the worktree's
	// HEAD reflog names: the user's gc and fsck find nothing missing.
	gcWorks(t, repo)
	fsckClean(t, repo)
	tree, err := m.Checkpoint(ctx, wt)
	if err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, repo, "show", tree+":a.txt"); got != "1 amended" {
		t.Errorf("a.txt in the checkpoint = %q; want the amended content", got)
	}
	rr, err := m.Remove(ctx, wt, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, repo, "show", "agentpool/s:a.txt"); got != "1 amended" || !rr.Committed {
		t.Errorf("after Remove = %+v, a.txt on the branch = %q; want the amended content committed", rr, got)
	}
	gitT(t, repo, "merge-base", "--is-ancestor", first, "agentpool/s") // what was imported stays
	noImportLeftovers(t, a)
}

// TestImportIgnoresPlantedAlternates: an alternates file the agent plants
// in its object store (pointing at another repository the daemon can
// read) is never obeyed by the import: a commit naming an object found
// only there is refused, and the object never enters the repository.
func TestImportIgnoresPlantedAlternates(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	secret := newRepo(t, "secret", map[string]string{"key": "the other repository's secret\n"})
	stolen := gitT(t, secret, "rev-parse", "HEAD:key")
	wt := create(t, m, "s", repo)
	a := newAgent(t, m, wt)
	a.plantAlternates(filepath.Join(secret, ".git", "objects"))
	a.commitIndex("steal", `git update-index --add --cacheinfo "100644,$ID,stolen.txt"`+"\n", "ID="+stolen)
	if got := a.sh(`git cat-file blob "$ID"`, "ID="+stolen); got != "the other repository's secret\n" {
		t.Fatalf("the agent's view does not borrow from the planted alternates: %q", got)
	}
	res := importT(t, m, wt)
	if res.Imported || res.Refused != RefusedUnverified {
		t.Fatalf("ImportAgentHistory() = %+v; want refused: %s (agent as %s)", res, RefusedUnverified, a.mode())
	}
	if _, err := gitRaw(repo, nil, "cat-file", "-e", stolen); err == nil {
		t.Errorf("the repository has the object %s of the other repository", stolen)
	}
	if got := gitT(t, repo, "rev-parse", "agentpool/s"); got != wt.BaseCommit {
		t.Errorf("agentpool/s = %s; want the base kept", got)
	}
	noImportLeftovers(t, a)
}

// TestImportPathsWithSeparators: a repository whose path holds the
// separators of alternates lists (':' and a double quote) imports all the
// same. (The agent's git runs with its object directory redirected: an
// overlay's options need their own escaping, the launcher's.)
func TestImportPathsWithSeparators(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, `re:po"x`, nil)
	wt := create(t, m, "s", repo)
	a := newAgent(t, m, wt)
	a.overlay = false
	c := a.commit("agent", map[string]string{"a.txt": "a\n"})
	if res := importT(t, m, wt); !res.Imported || res.After != c {
		t.Errorf("ImportAgentHistory() = %+v; want %s imported", res, c)
	}
	noImportLeftovers(t, a)
}

// TestImportIgnoresSymlinkedObjects: a loose object the agent makes a
// symlink to another repository's object file (which its view then
// reads) is never taken: the import is refused, and the object never
// enters the repository.
func TestImportIgnoresSymlinkedObjects(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	secret := newRepo(t, "secret", map[string]string{"key": "the other repository's secret\n"})
	stolen := gitT(t, secret, "rev-parse", "HEAD:key")
	wt := create(t, m, "s", repo)
	a := newAgent(t, m, wt)
	a.sh(`mkdir -p "$OBJECTS/${ID:0:2}"; ln -s "$SRC/${ID:0:2}/${ID:2}" "$OBJECTS/${ID:0:2}/${ID:2}"`,
		"ID="+stolen, "SRC="+filepath.Join(secret, ".git", "objects"))
	a.commitIndex("steal", `git update-index --add --cacheinfo "100644,$ID,stolen.txt"`, "ID="+stolen)
	res := importT(t, m, wt)
	if res.Imported || res.Refused != RefusedUnverified {
		t.Fatalf("ImportAgentHistory() = %+v; want refused: %s (agent as %s)", res, RefusedUnverified, a.mode())
	}
	if _, err := gitRaw(repo, nil, "cat-file", "-e", stolen); err == nil {
		t.Errorf("the repository has the object %s of the other repository", stolen)
	}
	noImportLeftovers(t, a)
}

// TestImportAgentsPacks: the agent's git repack packs its objects (and,
// in its view, deletes the loose ones of the shared store; its git gc
// stops at the read-only common directory): the packs are imported, and
// the shared store keeps every object.
func TestImportAgentsPacks(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	a := newAgent(t, m, wt)
	a.commit("one", map[string]string{"one.txt": "1\n"})
	c := a.commit("two", map[string]string{"two.txt": "2\n"})
	a.sh(`git repack -d -q 2>/dev/null; test -n "$(ls "$OBJECTS/pack/"*.pack)"`)
	res := importT(t, m, wt)
	if !res.Imported || res.After != c || res.Commits != 2 {
		t.Fatalf("ImportAgentHistory() = %+v; want 2 commits up to %s (agent as %s)", res, c, a.mode())
	}
	fsckClean(t, repo)
	gcWorks(t, repo)
	noImportLeftovers(t, a)
}

// TestImportBadPrivateRef: a private ref that names no commit is refused
// as such, logged once however many checkpoints find it, and the branch
// stays; so is one whose branch is gone.
func TestImportBadPrivateRef(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t, "repo", nil)
	tree := gitT(t, repo, "rev-parse", "HEAD^{tree}")
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, v GitView)
		want  string
	}{
		{"symbolic", func(t *testing.T, v GitView) { writeFile(t, v.Refs, "s", "ref: refs/heads/main\n") }, RefusedBadRef},
		{"garbage", func(t *testing.T, v GitView) { writeFile(t, v.Refs, "s", "not an id\n") }, RefusedBadRef},
		{"symlink", func(t *testing.T, v GitView) {
			must(t, os.Remove(v.Ref))
			must(t, os.Symlink(filepath.Join(repo, ".git", "refs", "heads", "main"), v.Ref))
		}, RefusedBadRef},
		{"a tree", func(t *testing.T, v GitView) { writeFile(t, v.Refs, "s", tree+"\n") }, RefusedBadRef},
		{"branch gone", func(t *testing.T, v GitView) {
			writeFile(t, v.Refs, "s", tree+"\n")
			gitT(t, repo, "update-ref", "-d", "refs/heads/agentpool/s")
		}, RefusedNoBranch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs lockedBuffer
			m, err := NewManager(Config{Root: filepath.Join(t.TempDir(), "worktrees"), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			must(t, err)
			defer m.Close()
			wt := create(t, m, "s", repo)
			defer m.Remove(ctx, wt, true)
			tc.plant(t, viewT(t, m, wt))
			for range 3 {
				if _, err := m.Checkpoint(ctx, wt); err != nil {
					t.Fatal(err)
				}
			}
			if n := strings.Count(logs.String(), "not imported"); n != 1 {
				t.Errorf("%d log lines of the refusal; want 1:\n%s", n, logs.String())
			}
			res := importT(t, m, wt)
			if tip := gitT(t, repo, "for-each-ref", "--format=%(objectname)", "refs/heads/agentpool/s"); res.Imported || res.Refused != tc.want || res.After != tip {
				t.Errorf("ImportAgentHistory() = %+v; want refused: %s, the branch kept", res, tc.want)
			}
		})
	}
}
