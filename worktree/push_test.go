package worktree

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPushAndContinue(t *testing.T) {
	ctx := context.Background()
	shared := newShared(t, map[string]string{"README.md": "shared\n"})
	url := "file://" + shared
	a, b := newHost(t), newHost(t)

	wt, err := a.Create(ctx, "s1", url, "")
	if err != nil {
		t.Fatalf("host A: Create() error = %v", err)
	}
	// Committed work (the agent's commit) and work left uncommitted.
	writeFile(t, wt.Path, "committed.txt", "committed\n")
	gitT(t, wt.Path, "add", "committed.txt")
	gitT(t, wt.Path, "commit", "-q", "-m", "agent commit")
	writeFile(t, wt.Path, "uncommitted.txt", "uncommitted\n")
	if _, err := a.Checkpoint(ctx, wt); err != nil {
		t.Fatalf("host A: Checkpoint() error = %v", err)
	}
	lease, err := a.LastPushed(ctx, wt)
	if err != nil || lease != (Lease{}) {
		t.Fatalf("host A: LastPushed() = %+v, %v; want nothing pushed yet", lease, err)
	}
	pushed, err := a.Push(ctx, wt, lease)
	if err != nil {
		t.Fatalf("host A: Push() error = %v", err)
	}
	if got := refOf(t, shared, "refs/heads/"+wt.Branch); got == "" || got != pushed.Branch {
		t.Errorf("remote %s = %q; want %q", wt.Branch, got, pushed.Branch)
	}
	if got := refOf(t, shared, CheckpointRefPrefix+"s1"); got == "" || got != pushed.Checkpoint {
		t.Errorf("remote checkpoint ref = %q; want %q", got, pushed.Checkpoint)
	}
	if got, _ := a.LastPushed(ctx, wt); got != pushed {
		t.Errorf("host A: LastPushed() = %+v; want %+v", got, pushed)
	}
	// Nothing changed: nothing to push, the same values.
	if again, err := a.Push(ctx, wt, pushed); err != nil || again != pushed {
		t.Errorf("host A: Push() again = %+v, %v; want %+v", again, err, pushed)
	}

	// Host B continues the session from the remote.
	wtB, fetched, err := b.Continue(ctx, "s1", url, ContinueOptions{BaseCommit: wt.BaseCommit})
	if err != nil {
		t.Fatalf("host B: Continue() error = %v", err)
	}
	if fetched != pushed {
		t.Errorf("host B: Continue() fetched %+v; want %+v", fetched, pushed)
	}
	if wtB.Path == wt.Path || wtB.Repo != url || wtB.Branch != wt.Branch {
		t.Errorf("host B: Continue() = %+v; want its own path, repo %s, branch %s", wtB, url, wt.Branch)
	}
	for name, want := range map[string]string{"committed.txt": "committed\n", "uncommitted.txt": "uncommitted\n", "README.md": "shared\n"} {
		if got := readFile(t, wtB.Path, name); got != want {
			t.Errorf("host B: %s = %q; want %q", name, got, want)
		}
	}
	if st := gitT(t, wtB.Path, "status", "--porcelain"); st != "?? uncommitted.txt" {
		t.Errorf("host B: git status = %q; want the uncommitted file alone (index at the branch)", st)
	}
	// B works on and pushes with what it fetched as its lease.
	writeFile(t, wtB.Path, "b.txt", "from B\n")
	if _, err := b.Checkpoint(ctx, wtB); err != nil {
		t.Fatalf("host B: Checkpoint() error = %v", err)
	}
	leaseB, _ := b.LastPushed(ctx, wtB)
	pushedB, err := b.Push(ctx, wtB, leaseB)
	if err != nil {
		t.Fatalf("host B: Push() error = %v", err)
	}
	// A, fenced off, still believes in its old values: refused, nothing
	// overwritten.
	writeFile(t, wt.Path, "late.txt", "late work on A\n")
	if _, err := a.Checkpoint(ctx, wt); err != nil {
		t.Fatalf("host A: Checkpoint() error = %v", err)
	}
	if _, err := a.Push(ctx, wt, pushed); !errors.Is(err, ErrRemoteMoved) {
		t.Fatalf("host A: Push() with a stale lease error = %v; want ErrRemoteMoved", err)
	}
	if got := refOf(t, shared, CheckpointRefPrefix+"s1"); got != pushedB.Checkpoint {
		t.Errorf("remote checkpoint ref = %s after the refused push; want B's %s", got, pushedB.Checkpoint)
	}
	// A lease that says "nothing there" is refused too when something is.
	if _, err := a.Push(ctx, wt, Lease{}); !errors.Is(err, ErrRemoteMoved) {
		t.Errorf("host A: Push() with an empty lease error = %v; want ErrRemoteMoved", err)
	}
}

func TestContinueRefused(t *testing.T) {
	ctx := context.Background()
	shared := newShared(t, nil)
	b := newHost(t)
	if _, _, err := b.Continue(ctx, "never", "file://"+shared, ContinueOptions{}); !errors.Is(err, ErrMissing) {
		t.Errorf("Continue() of a session never pushed error = %v; want ErrMissing", err)
	}
	local := newRepo(t, "local", nil)
	if _, _, err := b.Continue(ctx, "s1", local, ContinueOptions{}); !errors.Is(err, ErrNotMirrored) {
		t.Errorf("Continue() from a checkout error = %v; want ErrNotMirrored", err)
	}
}

// TestPushRunsNoRemoteHook: a shared repository on this host's disk is
// written by git receive-pack run as the daemon; its hooks must not run.
func TestPushRunsNoRemoteHook(t *testing.T) {
	ctx := context.Background()
	shared := newShared(t, nil)
	marker := filepath.Join(t.TempDir(), "hook-ran")
	for _, hook := range []string{"pre-receive", "update", "post-receive", "reference-transaction"} {
		writeFile(t, shared, "hooks/"+hook, "#!/bin/sh\necho "+hook+" >> "+marker+"\n")
		if err := os.Chmod(filepath.Join(shared, "hooks", hook), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := newHost(t)
	wt, err := m.Create(ctx, "s1", shared, "")
	if err != nil {
		t.Fatalf("Create() error = %v", err)
	}
	writeFile(t, wt.Path, "x.txt", "x\n")
	if _, err := m.Checkpoint(ctx, wt); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Push(ctx, wt, Lease{}); err != nil {
		t.Fatalf("Push() error = %v", err)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Errorf("the remote's hooks ran on push: %q", b)
	}
	if got := refOf(t, shared, CheckpointRefPrefix+"s1"); got == "" {
		t.Errorf("remote has no checkpoint ref after Push")
	}
}

func TestMergeThroughMirror(t *testing.T) {
	ctx := context.Background()
	shared := newShared(t, map[string]string{"README.md": "shared\n"})
	m := newHost(t)
	wt, err := m.Create(ctx, "s1", shared, "")
	if err != nil {
		t.Fatal(err)
	}
	wt2, err := m.Create(ctx, "s2", shared, "")
	if err != nil {
		t.Fatal(err)
	}
	wt3, err := m.Create(ctx, "s3", shared, "")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, wt.Path, "feature.txt", "feature\n")
	before := refOf(t, shared, "refs/heads/main")
	res, err := m.Merge(ctx, wt, MergeOptions{Lease: &Lease{}})
	if err != nil {
		t.Fatalf("Merge() error = %v", err)
	}
	if res.Into != "main" || res.Method != MergeFastForward || !res.Committed || res.Before != before || res.WorkingTree != "" {
		t.Errorf("Merge() = %+v; want a fast-forward of main from %s with the work committed", res, before)
	}
	if got := refOf(t, shared, "refs/heads/main"); got != res.Head {
		t.Errorf("remote main = %s; want the merge's head %s", got, res.Head)
	}
	if got := gitT(t, shared, "show", "main:feature.txt"); got != "feature" {
		t.Errorf("remote main:feature.txt = %q", got)
	}
	if got := refOf(t, shared, "refs/heads/"+wt.Branch); got != res.Head {
		t.Errorf("remote session branch = %s; want %s (pushed with the merge)", got, res.Head)
	}

	// A conflict: refused, nothing pushed.
	writeFile(t, wt2.Path, "feature.txt", "other\n")
	if _, err := m.Merge(ctx, wt2, MergeOptions{}); !errors.Is(err, ErrConflict) {
		t.Errorf("Merge() of a conflicting session error = %v; want ErrConflict", err)
	}
	if got := refOf(t, shared, "refs/heads/main"); got != res.Head {
		t.Errorf("remote main = %s after a refused merge; want %s", got, res.Head)
	}

	// A session branch the remote holds at another value than the lease:
	// refused, and the mirror's main is put back.
	writeFile(t, wt3.Path, "three.txt", "3\n")
	if _, err := m.Merge(ctx, wt3, MergeOptions{Lease: &Lease{Branch: res.Head}}); !errors.Is(err, ErrRemoteMoved) {
		t.Errorf("Merge() with a stale lease error = %v; want ErrRemoteMoved", err)
	}
	if got := refOf(t, shared, "refs/heads/main"); got != res.Head {
		t.Errorf("remote main = %s after a refused push; want %s", got, res.Head)
	}
	mirror := m.mirrorDir(shared)
	if got := refOf(t, mirror, "refs/heads/main"); got != res.Head {
		t.Errorf("mirror main = %s after a refused push; want it put back at %s", got, res.Head)
	}
}

// TestMergeBaseMovedSinceFetch: the remote's base moves between the
// mirror's fetch and the push of the merge: the push is refused, nothing
// is overwritten, and the mirror's base is put back.
func TestMergeBaseMovedSinceFetch(t *testing.T) {
	ctx := context.Background()
	shared := newShared(t, map[string]string{"README.md": "shared\n"})
	m := newHost(t)
	wt, err := m.Create(ctx, "s1", shared, "")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, wt.Path, "feature.txt", "feature\n")
	info, err := m.repo(ctx, wt.Repo)
	if err != nil {
		t.Fatal(err)
	}
	fetched := refOf(t, shared, "refs/heads/main")
	// Someone else pushes to main after the fetch.
	other := filepath.Join(t.TempDir(), "other")
	gitT(t, t.TempDir(), "clone", "-q", shared, other)
	writeFile(t, other, "other.txt", "other\n")
	gitT(t, other, "add", "-A")
	gitT(t, other, "commit", "-q", "-m", "other")
	gitT(t, other, "push", "-q", "origin", "main")
	moved := refOf(t, shared, "refs/heads/main")

	res, err := m.mergeLocked(ctx, info, wt, MergeOptions{})
	if err != nil {
		t.Fatalf("mergeLocked() error = %v", err)
	}
	if res.Before != fetched {
		t.Fatalf("merge from %s; want the fetched main %s", res.Before, fetched)
	}
	if err := m.pushMergeLocked(ctx, info, wt, MergeOptions{}, res); !errors.Is(err, ErrRemoteMoved) {
		t.Fatalf("pushMergeLocked() error = %v; want ErrRemoteMoved", err)
	}
	if got := refOf(t, shared, "refs/heads/main"); got != moved {
		t.Errorf("remote main = %s; want the other push's %s kept", got, moved)
	}
	if got := refOf(t, info.top, "refs/heads/main"); got != fetched {
		t.Errorf("mirror main = %s; want it put back at %s", got, fetched)
	}
	// Merging again fetches the new base and goes through.
	res, err = m.Merge(ctx, wt, MergeOptions{})
	if err != nil {
		t.Fatalf("Merge() again error = %v", err)
	}
	if res.Before != moved || refOf(t, shared, "refs/heads/main") != res.Head {
		t.Errorf("Merge() again = %+v; want main moved from %s on the remote", res, moved)
	}
}

// TestPushIgnoresPlantedAlternates: an agent may write the mirror's
// objects directory; an alternates file it plants there must not make a
// push send objects of another repository of this host.
func TestPushIgnoresPlantedAlternates(t *testing.T) {
	ctx := context.Background()
	shared := newShared(t, nil)
	secret := newRepo(t, "secret", map[string]string{"secret.txt": "the daemon user's secret\n"})
	blob := gitT(t, secret, "rev-parse", "HEAD:secret.txt")
	m := newHost(t)
	wt, err := m.Create(ctx, "s1", shared, "")
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.GitPaths(ctx, wt)
	if err != nil {
		t.Fatal(err)
	}
	// What the agent does: borrow the secret repository's objects, and
	// commit a tree naming the blob it knows the id of.
	writeFile(t, p.CommonDir, "objects/info/alternates", filepath.Join(secret, ".git", "objects")+"\n")
	out, err := gitRaw(wt.Path, strings.NewReader("100644 blob "+blob+"\tstolen.txt\n"), "mktree")
	if err != nil {
		t.Fatalf("mktree: %v\n%s", err, out)
	}
	commit := gitT(t, wt.Path, "commit-tree", strings.TrimSpace(out), "-m", "steal", "-p", "HEAD")
	gitT(t, wt.Path, "update-ref", "refs/heads/"+wt.Branch, commit)
	_, err = m.Push(ctx, wt, Lease{})
	if err == nil {
		if _, cerr := gitRaw(shared, nil, "cat-file", "-e", blob); cerr == nil {
			t.Fatalf("Push() sent the secret blob %s to the remote", blob)
		}
	}
	if exists(filepath.Join(p.CommonDir, "objects", "info", "alternates")) {
		t.Errorf("the planted alternates file is still in the mirror")
	}
}

// TestPruneOfURLSession: prune forgets in the mirror what Prune forgets in
// a checkout, and what this host recorded of its pushes; the remote's refs
// are the remote's.
func TestPruneOfURLSession(t *testing.T) {
	ctx := context.Background()
	shared := newShared(t, nil)
	m := newHost(t)
	wt, err := m.Create(ctx, "s1", shared, "")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, wt.Path, "x.txt", "x\n")
	if _, err := m.Checkpoint(ctx, wt); err != nil {
		t.Fatal(err)
	}
	pushed, err := m.Push(ctx, wt, Lease{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Remove(ctx, wt, false); err != nil {
		t.Fatal(err)
	}
	res, err := m.Prune(ctx, wt, PruneOptions{Branch: true})
	if err != nil || !res.BranchDeleted || !res.CheckpointsDeleted {
		t.Fatalf("Prune() = %+v, %v; want branch and checkpoints deleted", res, err)
	}
	mirror := m.mirrorDir(shared)
	for _, ref := range []string{"refs/heads/" + wt.Branch, CheckpointRefPrefix + "s1", PushedRefPrefix + "s1/branch", PushedRefPrefix + "s1/checkpoint"} {
		if got := refOf(t, mirror, ref); got != "" {
			t.Errorf("mirror %s = %s after Prune; want it gone", ref, got)
		}
	}
	if got := refOf(t, shared, CheckpointRefPrefix+"s1"); got != pushed.Checkpoint {
		t.Errorf("remote checkpoint ref = %q after Prune; want it kept at %s", got, pushed.Checkpoint)
	}
}
