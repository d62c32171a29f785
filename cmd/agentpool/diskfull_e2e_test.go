package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// envDiskFullNS marks the test binary re-executed in its own mount
// namespace, where it may mount a small tmpfs without touching the host.
const envDiskFullNS = "AGENTPOOL_TEST_DISKFULL_NS"

// inPrivateMountNS re-executes the running test in a private mount
// namespace (unshare -m, which needs root), marked by the variable env,
// and reports whether the caller is that copy and should go on; the
// outer test passes when the inner one did. Without root or unshare the
// test is skipped, or with required it fails under CI=true.
func inPrivateMountNS(t *testing.T, env string, required bool) bool {
	t.Helper()
	if os.Getenv(env) != "" {
		return true
	}
	unshare, err := exec.LookPath("unshare")
	ok := err == nil && os.Geteuid() == 0
	if required {
		agenttest.RequireFeature(t, ok, "needs root and unshare(1) for a private tmpfs")
	} else if !ok {
		t.Skip("needs root and unshare(1) for a private tmpfs")
	}
	cmd := exec.Command(unshare, "-m", "--propagation", "private", os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in a private mount namespace: %v\n%s", t.Name(), err, out)
	}
	t.Logf("in a private mount namespace:\n%s", out)
	return false
}

// TestDiskFull runs the daemon with its home on a 16 MiB tmpfs, fills it,
// and checks that a prompt gets 507 storage_full naming the cause, that
// listing and creating sessions answer in bounded time, that once space is
// freed a prompt works without a restart, and that SIGTERM still ends the
// daemon promptly. The tmpfs lives in a private mount namespace: the test
// re-executes itself under unshare -m, which needs root.
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	if !inPrivateMountNS(t, envDiskFullNS, false) {
		return
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", home).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", home).Run() })
	writeFakeProvider(t, home, agenttest.Script{Turns: []agenttest.Turn{{Echo: true,
		Steps: []agenttest.Step{{Chunks: 20}}}}})
	repo := newE2ERepo(t)
	d := startDaemon(t, bin, home)
	defer d.kill9()
	ctx := context.Background()
	s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "fake"})
	if err != nil {
		t.Fatalf("create session: %v\n%s", err, d.out)
	}
	if tn, err := d.client.Prompt(ctx, s.ID, "", "before", true); err != nil || tn.StopReason != "end_turn" {
		t.Fatalf("prompt before the disk is full = %+v, %v", tn, err)
	}

	filler := filepath.Join(home, "filler")
	fill(t, filler)

	_, err = d.client.Prompt(ctx, s.ID, "", "while full", false)
	var ae *httpapi.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusInsufficientStorage || ae.Code != httpapi.CodeStorageFull ||
		!strings.Contains(ae.Message, "disk") {
		t.Errorf("prompt with the disk full error = %v; want 507 storage_full naming the disk", err)
	}
	t.Logf("prompt with the disk full: %v", err)
	bounded := func(what string, call func(context.Context) error) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		err := call(ctx)
		if errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 4*time.Second {
			t.Errorf("%s with the disk full took %v (%v); want an answer within seconds", what, time.Since(start), err)
		}
		return err
	}
	if err := bounded("GET /v1/sessions", func(ctx context.Context) error {
		_, err := d.client.Sessions(ctx)
		return err
	}); err != nil {
		t.Errorf("list sessions with the disk full: %v", err)
	}
	err = bounded("POST /v1/sessions", func(ctx context.Context) error {
		_, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "fake"})
		return err
	})
	if err != nil && (!errors.As(err, &ae) || ae.Status != http.StatusInsufficientStorage) {
		t.Errorf("create session with the disk full error = %v; want success or 507", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if tn, err := d.client.Prompt(pctx, s.ID, "", "after", true); err != nil || tn.StopReason != "end_turn" {
		t.Errorf("prompt after space returned = %+v, %v; want end_turn without a restart\n%s", tn, err, d.out)
	}
	// Fill again and stop: SIGTERM must end the daemon in bounded time.
	fill(t, filler)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	termAt := time.Now()
	defer func() { t.Logf("SIGTERM with the disk full: exited after %v", time.Since(termAt)) }()
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		t.Errorf("daemon still running 45 s after SIGTERM with the disk full")
	}
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			break
		}
	}
	for small := buf[:512]; ; {
		if _, err := f.Write(small); err != nil {
			return
		}
	}
}
