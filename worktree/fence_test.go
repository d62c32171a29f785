package worktree

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestFencedPushes: once host B claimed the session's fence at a later
// epoch, host A's pushes are refused by the remote even when A expects
// exactly what the remote holds (a stale host that read the new owner's
// values), and A cannot claim the fence back; B pushes on. The fence is a
// chain the remote accepts with receive.denyNonFastForwards set, and its
// commits name the host and epoch of each push.
func TestFencedPushes(t *testing.T) {
	ctx := context.Background()
	shared := newShared(t, map[string]string{"README.md": "shared\n"})
	gitT(t, shared, "config", "receive.denyNonFastForwards", "true")
	url := "file://" + shared
	a, b := newHost(t), newHost(t)
	fa, fb := Fence{Host: "a", Epoch: 1}, Fence{Host: "b", Epoch: 2}

	wt, err := a.Create(ctx, "s1", url, "")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, wt.Path, "a.txt", "from A\n")
	if _, err := a.Checkpoint(ctx, wt); err != nil {
		t.Fatal(err)
	}
	pushedA, err := a.Push(ctx, wt, Lease{Fence: &fa})
	if err != nil {
		t.Fatalf("host A: Push() error = %v", err)
	}
	if got := fenceOnRemote(t, shared, "s1"); got != fa {
		t.Errorf("remote fence after A's push = %+v; want %+v", got, fa)
	}

	// B takes the session over: it fences first, and learns what the
	// remote holds.
	held, err := b.ClaimFence(ctx, "s1", url, "", fb)
	if err != nil {
		t.Fatalf("host B: ClaimFence() error = %v", err)
	}
	if held.Branch != pushedA.Branch || held.Checkpoint != pushedA.Checkpoint {
		t.Errorf("host B: ClaimFence() = %+v; want A's push %+v", held, pushedA)
	}
	// Claiming again at the same lease keeps the fence.
	before := refOf(t, shared, FenceRefPrefix+"s1")
	if _, err := b.ClaimFence(ctx, "s1", url, "", fb); err != nil || refOf(t, shared, FenceRefPrefix+"s1") != before {
		t.Errorf("host B: ClaimFence() again = %v, fence %s → %s; want it kept", err, before, refOf(t, shared, FenceRefPrefix+"s1"))
	}

	wtB, _, err := b.Continue(ctx, "s1", url, ContinueOptions{BaseCommit: wt.BaseCommit})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, wtB.Path, "b.txt", "from B\n")
	if _, err := b.Checkpoint(ctx, wtB); err != nil {
		t.Fatal(err)
	}
	pushedB, err := b.Push(ctx, wtB, Lease{Branch: held.Branch, Checkpoint: held.Checkpoint, Fence: &fb})
	if err != nil {
		t.Fatalf("host B: Push() error = %v", err)
	}

	// A, stale, expects exactly what the remote holds: the fence refuses it.
	writeFile(t, wt.Path, "late.txt", "late work on A\n")
	if _, err := a.Checkpoint(ctx, wt); err != nil {
		t.Fatal(err)
	}
	_, err = a.Push(ctx, wt, Lease{Branch: pushedB.Branch, Checkpoint: pushedB.Checkpoint, Fence: &fa})
	if !errors.Is(err, ErrRemoteMoved) {
		t.Fatalf("host A: stale Push() error = %v; want ErrRemoteMoved", err)
	}
	if got := refOf(t, shared, CheckpointRefPrefix+"s1"); got != pushedB.Checkpoint {
		t.Errorf("remote checkpoint = %s after A's refused push; want B's %s", got, pushedB.Checkpoint)
	}
	if _, err := a.ClaimFence(ctx, "s1", url, "", fa); !errors.Is(err, ErrRemoteMoved) || !strings.Contains(err.Error(), "host b at epoch 2") {
		t.Errorf("host A: ClaimFence() at its old epoch error = %v; want ErrRemoteMoved naming host b at epoch 2", err)
	}
	if got := fenceOnRemote(t, shared, "s1"); got != fb {
		t.Errorf("remote fence = %+v; want %+v", got, fb)
	}
	// B pushes on; the fence's history names every push.
	writeFile(t, wtB.Path, "b2.txt", "more from B\n")
	if _, err := b.Checkpoint(ctx, wtB); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Push(ctx, wtB, Lease{Branch: pushedB.Branch, Checkpoint: pushedB.Checkpoint, Fence: &fb}); err != nil {
		t.Fatalf("host B: second Push() error = %v", err)
	}
	log := gitT(t, shared, "log", "--format=%b", FenceRefPrefix+"s1")
	if n := strings.Count(log, "Host: b"); n != 3 {
		t.Errorf("fence history names host b %d times; want 3 (claim, two pushes):\n%s", n, log)
	}
	if n := strings.Count(log, "Host: a"); n != 2 {
		t.Errorf("fence history names host a %d times; want 2 (claim, push):\n%s", n, log)
	}
}

// fenceOnRemote reads whom the remote's fence of session names.
func fenceOnRemote(t *testing.T, bare, session string) Fence {
	t.Helper()
	f, ok := parseFence(gitT(t, bare, "cat-file", "commit", FenceRefPrefix+session))
	if !ok {
		t.Fatalf("no fence of %s on the remote", session)
	}
	return f
}
