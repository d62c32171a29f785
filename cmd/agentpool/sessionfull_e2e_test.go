package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// envSessionFullNS marks the test binary re-executed in its own mount
// namespace for TestSessionCreateDiskFull.
const envSessionFullNS = "AGENTPOOL_TEST_SESSIONFULL_NS"

// TestSessionCreateDiskFull runs the daemon with its worktrees directory on
// a small tmpfs (its data directory elsewhere), fills the tmpfs, and checks
// that creating a session answers 507 storage_full naming that file system,
// through the API and the CLI, as a prompt does on a full disk, also when
// the disk is nearly full and git fails midway in words that do not say
// why (it answered 500 internal then); once space
// is freed a session is created without a restart. The tmpfs lives in a
// private mount namespace (the test re-executes itself under unshare -m,
// which needs root).
func TestSessionCreateDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	if !inPrivateMountNS(t, envSessionFullNS, true) {
		return
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	wts := filepath.Join(t.TempDir(), "worktrees")
	if err := os.Mkdir(wts, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", wts).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", wts).Run() })
	writeFakeProvider(t, home, agenttest.Script{Turns: []agenttest.Turn{{Echo: true}}})
	// The checkout needs more than the room left below: git then fails
	// midway, in words that do not say the disk is full.
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{
		"README.md": "# r\n", "data.txt": strings.Repeat("agentpool worktree content\n", 80000)})
	d := startDaemon(t, bin, home, "AGENTPOOL_WORKTREES="+wts)
	d.stopAtCleanup()
	ctx := context.Background()

	refused := func(how string, err error) {
		t.Helper()
		var ae *httpapi.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusInsufficientStorage || ae.Code != httpapi.CodeStorageFull ||
			!strings.Contains(ae.Message, "mounted at "+wts) {
			t.Errorf("POST /v1/sessions with the worktrees' disk %s: error = %v; want 507 storage_full naming the file system mounted at %s", how, err, wts)
		}
		t.Logf("POST /v1/sessions with the disk %s: %v", how, err)
	}
	filler := filepath.Join(wts, "filler")
	fill(t, filler)
	_, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "fake"})
	refused("full", err)

	// Nearly full: 256 KiB left.
	st, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, st.Size()-256<<10); err != nil {
		t.Fatal(err)
	}
	_, err = d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "fake"})
	refused("nearly full", err)
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "fake")
	if err == nil || !strings.Contains(out, "storage_full") || !strings.Contains(out, "mounted at "+wts) {
		t.Errorf("agentpool session new with the worktrees' disk nearly full = %v\n%s\nwant a failure saying storage_full and naming the file system mounted at %s", err, out, wts)
	}
	t.Logf("agentpool session new with the disk nearly full: %s", out)

	if list, err := d.client.Sessions(ctx); err != nil || len(list) != 0 {
		t.Errorf("sessions after the refused creates = %+v, %v; want none", list, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	// The repository's disk full: git cannot write the session's branch
	// ("cannot update ref"), without saying why.
	repoFS := filepath.Join(t.TempDir(), "repofs")
	if err := os.Mkdir(repoFS, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", repoFS).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", repoFS).Run() })
	small := e2eRepoAt(t, filepath.Join(repoFS, "repo"), map[string]string{"README.md": "# small\n"})
	fill(t, filepath.Join(repoFS, "filler"))
	_, err = d.client.CreateSession(ctx, pool.CreateRequest{Repo: small, Agent: "fake"})
	var ae *httpapi.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusInsufficientStorage || ae.Code != httpapi.CodeStorageFull ||
		!strings.Contains(ae.Message, "mounted at "+repoFS) {
		t.Errorf("POST /v1/sessions with the repository's disk full: error = %v; want 507 storage_full naming the file system mounted at %s", err, repoFS)
	}
	t.Logf("POST /v1/sessions with the repository's disk full: %v", err)

	if s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "fake"}); err != nil {
		t.Errorf("POST /v1/sessions after space returned: %v; want a session without a restart", err)
	} else if !strings.HasPrefix(s.Worktree.Path, wts+"/") {
		t.Errorf("session's worktree = %s; want it under %s", s.Worktree.Path, wts)
	}
}
