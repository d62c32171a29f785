package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// TestFairnessBystandersUnaffectedByFloods runs the real daemon with three
// bystander sessions prompting back to back, first alone, then while
// another session's agent floods 100,000 small updates in one turn, then
// while another's sends 300 updates of 1 MiB (see runFairness). Every
// update of each flood reaches a reader following its session, once and
// in order, and is stored; the flooding agent is the one slowed (it says
// so once, agent.slowed, and its events waited for room) and no bystander
// is; and the bystanders' turns stay within a bound of their baseline,
// measured in the same run (the bound has a margin for a loaded test
// machine; BenchmarkFairness reports the figures).
func TestFairnessBystandersUnaffectedByFloods(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the daemon for several seconds")
	}
	load := fairnessLoad{chunks: 100_000, big: 300, baseline: 2 * time.Second}
	phases, client := runFairness(t, agentpoolBinary(t), load)
	t.Logf("bystander turns (%d sessions, back to back):\n%s", bystanders, fairnessTable(phases))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	base := phases[0]
	if len(base.lat) < 30 {
		t.Fatalf("%d baseline turns; want a measure", len(base.lat))
	}
	want := map[string]struct {
		updates int
		bytes   int64
	}{"chunks": {load.chunks, 0}, "big": {load.big, int64(load.big) << 20}}
	for _, ph := range phases[1:] {
		w := want[ph.name]
		r := ph.read
		switch {
		case r.err != nil:
			t.Errorf("%s: follower: %v", ph.name, r.err)
		case r.updates != w.updates:
			t.Errorf("%s: the follower read %d updates; want %d", ph.name, r.updates, w.updates)
		case r.misordered != 0:
			t.Errorf("%s: %d events out of seq order (a gap, a repeat or a step back)", ph.name, r.misordered)
		case r.bigBytes < w.bytes:
			t.Errorf("%s: the follower read %d bytes of updates; want at least %d", ph.name, r.bigBytes, w.bytes)
		}
		// The flooder was the one slowed, and said so once.
		if r.slowed != 1 {
			t.Errorf("%s: %d agent.slowed events in the flooding session; want 1", ph.name, r.slowed)
		}
		found := false
		for _, q := range ph.queues {
			if q.Session == ph.session {
				found = true
				if q.Holds == 0 || q.Held <= 0 || q.Episodes != 1 {
					t.Errorf("%s: the flood's write queue %+v; want its events held for room, in 1 episode", ph.name, q)
				}
				// 300 MiB beside the bystanders' turns: paced at the
				// slowed rate (32 MiB/s) for most of them.
				if ph.name == "big" && q.Paced < time.Second {
					t.Errorf("%s: the flood was paced %v; want its megabytes taken at the slowed rate while the bystanders prompt", ph.name, q.Paced)
				}
			} else if _, by := base.prompts[q.Session]; by && (q.Holds > 0 || q.Episodes > 0 || q.Paced > 0) {
				t.Errorf("%s: bystander %s was held: %+v", ph.name, q.Session, q)
			}
		}
		if !found {
			t.Errorf("%s: no write queue for the flooding session %s in GET /v1/pool", ph.name, ph.session)
		}
		// The bystanders' turns: the goal is p50 within 2× the baseline's
		// and p99 within 30 ms; the test allows for a loaded machine (and
		// a race-detecting client) while still failing when a flood holds
		// them as it did (p50 14× the baseline, p99 80–140 ms with the
		// small updates).
		p50, p99, b50 := ph.q(0.5), ph.q(0.99), base.q(0.5)
		if len(ph.lat) < 20 {
			t.Errorf("%s: %d bystander turns during the flood; want them to go on", ph.name, len(ph.lat))
		}
		if p50 > 5*b50+2 {
			t.Errorf("%s: bystander p50 %.1f ms, %.1f× the baseline's %.1f ms; want at most 5× + 2 ms", ph.name, p50, p50/b50, b50)
		}
		if p99 > max(250, 20*base.q(0.99)) {
			t.Errorf("%s: bystander p99 %.1f ms (baseline %.1f ms); want at most 250 ms", ph.name, p99, base.q(0.99))
		}
	}
	// The flooders' agents yield the CPUs (10 nicer than agents run,
	// kept until their events find room again); the bystanders' do not.
	st, err := client.Pool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	flooders := map[string]bool{phases[1].session: true, phases[2].session: true}
	for _, b := range st.Backends {
		_, by := base.prompts[b.Session]
		if b.PID <= 0 || !by && !flooders[b.Session] {
			continue
		}
		nice, err := niceOf(b.PID)
		if err != nil {
			t.Errorf("nice of %s's agent: %v", b.Session, err)
			continue
		}
		if want := map[bool]int{true: min(sandbox.AgentNice+10, 19), false: sandbox.AgentNice}[flooders[b.Session]]; nice != want {
			t.Errorf("the agent of %s (flooder: %v) runs at nice %d; want %d", b.Session, flooders[b.Session], nice, want)
		}
	}
	// No bystander was slowed.
	for id := range base.prompts {
		evs, err := client.EventLog(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == backends.EventAgentSlowed {
				t.Errorf("bystander %s was slowed: %s", id, ev.Data)
			}
		}
	}
	// Every small update is stored, once.
	evs, err := client.EventLog(ctx, phases[1].session, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("stored event %d has seq %d", i, ev.Seq)
		}
		if ev.Type == backends.EventMessageChunk {
			n++
		}
	}
	if n != load.chunks {
		t.Errorf("%d small updates stored; want %d", n, load.chunks)
	}
}

// niceOf reads the niceness of process pid from /proc.
func niceOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 17 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	return strconv.Atoi(f[16]) // field 19 of stat
}
