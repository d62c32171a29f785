package pty_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/pty"
)

func TestStopLeavesNothing(t *testing.T) {
	const grace = 500 * time.Millisecond
	tests := []struct {
		name string
		env  []string
		// minimum time Stop must take: a program that exits on the
		// hang-up stops at once; one that ignores SIGHUP and SIGTERM
		// waits out both graces before SIGKILL.
		minStop time.Duration
		maxStop time.Duration
	}{
		{name: "exits on hang-up", env: []string{envGrandkids + "=1"}, maxStop: grace},
		{name: "ignores hang-up and SIGTERM", env: []string{envGrandkids + "=1", envStubborn + "=1"}, minStop: 2 * grace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, pty.Config{Spec: fakeSpec(t, tt.env...), StopGrace: grace, KillGrace: grace})
			info := h.start(t, "")
			// The leader, a sleeper in its group, and one in a group of
			// its own in the same session.
			var members []int
			deadline := time.Now().Add(5 * time.Second)
			for len(members) < 3 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				members = pty.SessionMembers(info.PID)
			}
			if len(members) < 3 || !slices.Contains(members, info.PID) {
				t.Fatalf("SessionMembers(%d) = %v; want the leader and two sleepers", info.PID, members)
			}
			groups := map[int]bool{}
			for _, pid := range members {
				if len(backends.GroupMembers(pid)) > 0 {
					groups[pid] = true
				}
			}
			if len(groups) < 2 {
				t.Fatalf("sleepers %v are all in one process group; want a second group in the session", members)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			if err := h.b.Stop(ctx); err != nil {
				t.Fatalf("Stop() = %v", err)
			}
			took := time.Since(start)
			if took < tt.minStop || (tt.maxStop > 0 && took > tt.maxStop) {
				t.Errorf("Stop() took %v; want between %v and %v", took, tt.minStop, tt.maxStop)
			}
			if left := pty.SessionMembers(info.PID); len(left) > 0 {
				t.Errorf("SessionMembers(%d) after Stop = %v; want none", info.PID, left)
			}
			if left := backends.GroupMembers(info.PID); len(left) > 0 {
				t.Errorf("GroupMembers(%d) after Stop = %v; want none", info.PID, left)
			}
			if err := h.b.Err(); err != nil {
				t.Errorf("Err() after Stop = %v; want nil", err)
			}
			ev := h.outside.waitType(t, backends.EventAgentExited)
			var data backends.ExitData
			_ = json.Unmarshal(ev.Data, &data)
			if !data.Expected || data.PID != info.PID {
				t.Errorf("agent.exited = %+v; want expected, pid %d", data, info.PID)
			}
			if err := h.b.Stop(ctx); err != nil {
				t.Errorf("second Stop() = %v; want nil", err)
			}
		})
	}
}

func TestStopDuringTurn(t *testing.T) {
	h := newHarness(t, pty.Config{Spec: fakeSpec(t)})
	h.start(t, "")
	errc := make(chan error, 1)
	go func() {
		_, err := h.prompt(t, "hang")
		errc <- err
	}()
	waitScreen(t, h.b, "thinking")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.b.Stop(ctx); err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Error("Prompt() = nil after Stop; want an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Prompt() still running after Stop")
	}
}

func TestStopWithExpiredContext(t *testing.T) {
	h := newHarness(t, pty.Config{Spec: fakeSpec(t, envStubborn+"=1"), StopGrace: 5 * time.Second, KillGrace: 5 * time.Second})
	info := h.start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := h.b.Stop(ctx); err == nil {
		t.Error("Stop() with an expiring context = nil; want its error")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Stop() took %v after its context expired; want a prompt SIGKILL", took)
	}
	if left := pty.SessionMembers(info.PID); len(left) > 0 {
		t.Errorf("SessionMembers(%d) = %v; want none", info.PID, left)
	}
}
