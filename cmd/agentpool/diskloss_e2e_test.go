package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
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
	if report.Seq <= rep.Lost.ToSeq {
		t.Errorf("loss report has seq %d; want it after the lost seqs %d-%d, which are never reused", report.Seq, rep.Lost.FromSeq, rep.Lost.ToSeq)
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

// envDiskDeadlineNS marks TestDiskFullTurnDeadline re-executed in its own
// mount namespace.
const envDiskDeadlineNS = "AGENTPOOL_TEST_DISKDEADLINE_NS"

// writeFakeProviderTimeout is writeFakeProvider with a turn_timeout.
func writeFakeProviderTimeout(t *testing.T, home string, s agenttest.Script, turnTimeout string) {
	t.Helper()
	writeFakeProvider(t, home, s)
	setProviderField(t, home, "fake", "turn_timeout", turnTimeout)
}

// setProviderField sets one field of a provider's entry in home's
// providers.json.
func setProviderField(t *testing.T, home, provider, field string, value any) {
	t.Helper()
	editProviders(t, home, func(doc map[string]any) {
		doc["providers"].(map[string]any)[provider].(map[string]any)[field] = value
	})
}

// editProviders rewrites home's providers.json with edit applied to it.
func editProviders(t *testing.T, home string, edit func(doc map[string]any)) {
	t.Helper()
	path := filepath.Join(home, providersFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc)
	b, _ = json.MarshalIndent(doc, "", "  ")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestDiskFullTurnDeadline fills the daemon's disk in the middle of a turn
// that streams events and lets the turn's deadline pass while nothing can
// be stored: the turn must end all the same (the agent is stopped, the
// session becomes free), and once space returns, without a restart, its
// turn.ended must be stored and reach the stream, and every event a reader
// was given must be stored. Root only: a 16 MiB tmpfs in a private mount
// namespace. It runs twice: with an agent fast enough to fill the write
// queue while the disk is full, and with one that leaves it room.
func TestDiskFullTurnDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	if !inPrivateMountNS(t, envDiskDeadlineNS, true) {
		return
	}
	bin := agentpoolBinary(t)
	for _, rate := range []int{40000, 2000} {
		t.Run(fmt.Sprintf("%d chunks per second", rate), func(t *testing.T) { diskFullTurnDeadline(t, bin, rate) })
	}
}

// diskFullTurnDeadline is TestDiskFullTurnDeadline with an agent sending
// rate chunks a second.
func diskFullTurnDeadline(t *testing.T, bin string, rate int) {
	home := t.TempDir()
	mountTmpfs(t, home, "16m")
	writeFakeProviderTimeout(t, home, agenttest.Script{Turns: []agenttest.Turn{{Echo: true,
		Steps: []agenttest.Step{{Chunks: 10_000_000, ChunksPerSecond: rate}}}}}, "4s")
	repo := newE2ERepo(t)
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "fake"})
	if err != nil {
		t.Fatalf("create session: %v\n%s", err, d.out)
	}
	rctx, stopReader := context.WithCancel(ctx)
	defer stopReader()
	seen := make(chan backends.Event, 1<<20)
	go func() {
		_ = d.client.Events(rctx, s.ID, 0, func(ev backends.Event) error {
			seen <- ev
			return nil
		})
	}()
	promptAt := time.Now()
	tn, err := d.client.Prompt(ctx, s.ID, "", "stream", false)
	if err != nil {
		t.Fatalf("prompt: %v\n%s", err, d.out)
	}
	waitStored(t, d, s.ID, 100)
	filler := filepath.Join(home, "filler")
	fill(t, filler)
	// The deadline passes while the disk is full.
	time.Sleep(8 * time.Second)
	// The session is free again, and a prompt is refused for the disk.
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_, perr := d.client.Prompt(pctx, s.ID, "", "while full", false)
	cancel()
	var ae *httpapi.Error
	if !errors.As(perr, &ae) || ae.Status != http.StatusInsufficientStorage || !strings.Contains(ae.Message, "disk") {
		t.Errorf("prompt while the disk is full, after the deadline: %v; want 507 storage_full naming the disk", perr)
	}
	fullFor := time.Since(promptAt)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var ended *backends.Event
	got := map[int64]backends.Event{}
	timeout := time.After(30 * time.Second)
	for ended == nil {
		select {
		case ev := <-seen:
			got[ev.Seq] = ev
			if ev.Type == backends.EventTurnEnded && ev.Turn == tn.ID {
				ended = &ev
			}
		case <-timeout:
			t.Fatalf("no turn.ended on the stream 30 s after space returned (turn deadline 4 s)\n%s", d.out)
		}
	}
	var end struct {
		StopReason string `json:"stop_reason"`
		DurationMS int64  `json:"duration_ms"`
	}
	if err := json.Unmarshal(ended.Data, &end); err != nil {
		t.Fatal(err)
	}
	if end.StopReason != "timeout" {
		t.Errorf("turn.ended = %s; want stop reason timeout", ended.Data)
	}
	// The turn ended at its deadline, while the disk was full, not when
	// space returned: its recorded duration is shorter than the time from
	// the prompt to the freeing of space.
	if time.Duration(end.DurationMS)*time.Millisecond >= fullFor {
		t.Errorf("turn.ended after %d ms, once space returned (%v after the prompt); want it ended at its 4 s deadline while the disk was full: %s",
			end.DurationMS, fullFor, ended.Data)
	}
	stored, err := d.client.EventLog(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[int64]backends.Event{}
	for _, ev := range stored {
		bySeq[ev.Seq] = ev
	}
	for seq, ev := range got {
		if st, ok := bySeq[seq]; !ok || st.Type != ev.Type || compactJSON(st.Data) != compactJSON(ev.Data) {
			t.Errorf("seq %d delivered as %s is stored as %+v (present %v)", seq, ev.Type, st, ok)
		}
	}
	if _, err := d.client.Prompt(ctx, s.ID, "", "again", false); err != nil {
		t.Errorf("prompt after the turn ended: %v", err)
	}
	t.Logf("%d events delivered, all stored; turn.ended: %s", len(got), ended.Data)
}
