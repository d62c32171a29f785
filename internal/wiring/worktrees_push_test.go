package wiring

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentpool/agentpool/worktree"
)

// memLedger is a push ledger in memory, held by host at epoch.
type memLedger struct {
	mu                    sync.Mutex
	host                  string
	epoch                 int64
	branch, ckpt, tree    string
	failRecord, notHolder bool
}

func (l *memLedger) Host() string { return l.host }

func (l *memLedger) PushedHeld(context.Context, string) (string, string, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.notHolder {
		return "", "", 0, errors.New("session lease not held by this host")
	}
	return l.branch, l.ckpt, l.epoch, nil
}

func (l *memLedger) RecordPushed(_ context.Context, _, branch, ckpt, tree string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failRecord {
		return errors.New("database unreachable")
	}
	l.branch, l.ckpt, l.tree = branch, ckpt, tree
	return nil
}

// gitOut runs git in dir and returns its trimmed output.
func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// sharedRemote makes a bare repository with one commit on main.
func sharedRemote(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	gitOut(t, t.TempDir(), "init", "-q", "-b", "main", src)
	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("shared\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitOut(t, src, "add", ".")
	gitOut(t, src, "commit", "-q", "-m", "init")
	bare := filepath.Join(t.TempDir(), "shared.git")
	gitOut(t, src, "init", "-q", "--bare", "-b", "main", bare)
	gitOut(t, src, "push", "-q", bare, "main")
	return bare
}

// TestPushesFencedAndHealed: a host's pushes go with its lease as the
// remote's fence and are recorded with the checkpoint's tree; a push
// whose record failed leaves the ledger behind the remote, and the next
// push still lands (this host's own record of its pushes says what the
// remote holds); a host that no longer holds the session pushes nothing;
// a close waits for the push and says where the work is, or why it is
// in this host's copy only.
func TestPushesFencedAndHealed(t *testing.T) {
	ctx := context.Background()
	bare := sharedRemote(t)
	url := "file://" + bare
	home := t.TempDir()
	m, err := worktree.NewManager(worktree.Config{Root: filepath.Join(home, "worktrees"), MirrorRoot: filepath.Join(home, "mirrors"),
		TrustFile: filepath.Join(home, "trusted.json"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	led := &memLedger{host: "host-a", epoch: 3}
	pushes := NewPushes()
	w := Worktrees{M: m, Ledger: led, Pushes: pushes, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	wt, err := w.Create(ctx, "s1", url, "")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(wt.Path, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		tree, err := w.Checkpoint(ctx, wt)
		if err != nil {
			t.Fatal(err)
		}
		if err := pushes.Wait(ctx, "s1"); err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(tree) == "" {
			t.Fatal("no checkpoint")
		}
	}
	write("a.txt", "a\n")
	if got := gitOut(t, bare, "show", worktree.CheckpointRefPrefix+"s1:a.txt"); got != "a" {
		t.Fatalf("remote checkpoint a.txt = %q", got)
	}
	if led.tree == "" || led.tree != gitOut(t, bare, "rev-parse", worktree.CheckpointRefPrefix+"s1^{tree}") {
		t.Errorf("ledger tree %q; want the pushed checkpoint's", led.tree)
	}
	if msg := gitOut(t, bare, "log", "-1", "--format=%b", worktree.FenceRefPrefix+"s1"); !strings.Contains(msg, "Host: host-a") || !strings.Contains(msg, "Epoch: 3") {
		t.Errorf("remote fence = %q; want host-a at epoch 3", msg)
	}
	// A push whose record fails: the ledger is behind the remote.
	led.mu.Lock()
	led.failRecord = true
	led.mu.Unlock()
	write("b.txt", "b\n")
	led.mu.Lock()
	led.failRecord = false
	behind := led.ckpt
	led.mu.Unlock()
	write("c.txt", "c\n")
	if got := gitOut(t, bare, "show", worktree.CheckpointRefPrefix+"s1:c.txt"); got != "c" {
		t.Errorf("remote checkpoint c.txt = %q; want the push after a failed record to land", got)
	}
	if led.ckpt == behind {
		t.Error("the ledger did not catch up with the remote")
	}
	// Lost the session: nothing is pushed, and a close says where the
	// work is.
	led.mu.Lock()
	led.notHolder = true
	led.mu.Unlock()
	before := gitOut(t, bare, "rev-parse", "refs/heads/"+wt.Branch)
	write("d.txt", "d\n")
	res, err := w.Remove(ctx, wt, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.PushError == "" || res.Remote != "" || res.Host != "host-a" {
		t.Errorf("close of a session not held = %+v; want the push error, on host-a", res)
	}
	if after := gitOut(t, bare, "rev-parse", "refs/heads/"+wt.Branch); after != before {
		t.Errorf("the remote branch moved from %s to %s for a host that does not hold the session", before, after)
	}
}
