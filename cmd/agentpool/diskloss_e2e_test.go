package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// envDiskLossNS marks TestDiskFullStopReportsLoss re-executed in its own
// mount namespace.
const envDiskLossNS = "AGENTPOOL_TEST_DISKLOSS_NS"

// mountTmpfs mounts a tmpfs of size at dir (in the test's private mount
// namespace) and unmounts it at cleanup.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
}

// waitStored waits until the session's stored history has at least n
// events, and returns it.
func waitStored(t *testing.T, d *daemon, session string, n int) []backends.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		log, err := d.client.EventLog(context.Background(), session, 0)
		if err == nil && len(log) >= n {
			return log
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s has %d stored events (%v); want %d\n%s", session, len(log), err, n, d.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDiskFullStopReportsLoss stops the daemon (SIGTERM) while its disk is
// full in the middle of a turn that streams events, so that the store gives
// up the events it could not write; once space is back, the restarted
// daemon must say so in the session's history ("N events could not be
// stored", with the seqs they had), and the turn that was running must
// have its turn.ended (interrupted). Root only: a 16 MiB tmpfs in a
// private mount namespace.
func TestDiskFullStopReportsLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	if !inPrivateMountNS(t, envDiskLossNS, true) {
		return
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	mountTmpfs(t, home, "16m")
	writeFakeProvider(t, home, agenttest.Script{Turns: []agenttest.Turn{{Echo: true,
		Steps: []agenttest.Step{{Chunks: 1_000_000, ChunksPerSecond: 2000}}}}})
	repo := newE2ERepo(t)
	d := startDaemon(t, bin, home)
	defer d.kill9()
	ctx := context.Background()
	s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "fake"})
	if err != nil {
		t.Fatalf("create session: %v\n%s", err, d.out)
	}
	tn, err := d.client.Prompt(ctx, s.ID, "", "stream", false)
	if err != nil {
		t.Fatalf("prompt: %v\n%s", err, d.out)
	}
	waitStored(t, d, s.ID, 100)
	filler := filepath.Join(home, "filler")
	fill(t, filler)
	time.Sleep(time.Second) // the agent goes on streaming; nothing more can be stored
	before, err := d.client.EventLog(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("daemon still running 60 s after SIGTERM with the disk full\n%s", d.out)
	}
	if !strings.Contains(d.out.String(), "events dropped") {
		t.Fatalf("the daemon stopped without giving up events; the test did not exercise a loss\n%s", d.out)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	d2 := startDaemon(t, bin, home)
	d2.stopAtCleanup()
	log, err := d2.client.EventLog(ctx, s.ID, 0)
	if err != nil {
		t.Fatalf("event log after restart: %v\n%s", err, d2.out)
	}
	var report *backends.Event
	ended := 0
	for i, ev := range log {
		if i < len(before) && (ev.Seq != before[i].Seq || ev.Type != before[i].Type) {
			t.Errorf("stored event %d changed across the restart: %d %s, was %d %s", i, ev.Seq, ev.Type, before[i].Seq, before[i].Type)
		}
		switch {
		case ev.Type == backends.EventError && strings.Contains(string(ev.Data), "could not be stored"):
			report = &log[i]
		case ev.Type == backends.EventTurnEnded && ev.Turn == tn.ID:
			ended++
			if report == nil {
				t.Errorf("turn.ended (seq %d) comes before the loss report", ev.Seq)
			}
		}
	}
	if report == nil {
		t.Fatalf("no event in the session's history reports the events lost at the stop; last events: %s\n%s", tail(log, 5), d2.out)
	}
	var rep struct {
		Error string `json:"error"`
		Lost  struct {
			Count   int64   `json:"count"`
			FromSeq int64   `json:"from_seq"`
			ToSeq   int64   `json:"to_seq"`
			Turns   []int64 `json:"turns"`
		} `json:"lost"`
	}
	if err := json.Unmarshal(report.Data, &rep); err != nil {
		t.Fatal(err)
	}
	last := before[len(before)-1].Seq
	if rep.Lost.Count <= 0 || rep.Lost.FromSeq <= last || rep.Lost.ToSeq < rep.Lost.FromSeq || len(rep.Lost.Turns) == 0 || rep.Lost.Turns[0] != tn.ID {
		t.Errorf("loss report = %s; want a count and the seqs after %d, of turn %d", report.Data, last, tn.ID)
	}
	if ended != 1 {
		t.Errorf("turn %d has %d turn.ended after the restart; want 1", tn.ID, ended)
	}
	t.Logf("after the restart: %s", report.Data)
}

// tail returns the last n events as lines, for failure messages.
func tail(log []backends.Event, n int) string {
	var b strings.Builder
	for _, ev := range log[max(0, len(log)-n):] {
		b.WriteString("\n" + string(ev.Type) + " " + string(ev.Data))
	}
	return b.String()
}
