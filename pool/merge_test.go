package pool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// eventIndex returns the index of the first event of type typ, or -1.
func eventIndex(evs []backends.Event, typ backends.EventType) int {
	for i, ev := range evs {
		if ev.Type == typ {
			return i
		}
	}
	return -1
}

func TestSetupRunsBeforeTheFirstTurn(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, nil)
	setup := `{"setup": {"command": ["sh", "-c", "sleep 0.3; echo prepared; echo ready > ready.txt"]}}`
	if err := os.WriteFile(filepath.Join(e.repo, ".agentpool.json"), []byte(setup), 0o644); err != nil {
		t.Fatal(err)
	}
	e.trustSetup()
	s := e.session("fake")
	// Sent at once: the turn waits for the setup.
	e.prompt(s.ID, "", "hello")
	if _, err := os.Stat(filepath.Join(s.Worktree.Path, "ready.txt")); err != nil {
		t.Errorf("setup's file: %v", err)
	}
	evs := e.events(s.ID)
	started, ended, turn := eventIndex(evs, pool.EventSetupStarted), eventIndex(evs, pool.EventSetupEnded), eventIndex(evs, backends.EventTurnStarted)
	if started < 0 || ended < started || turn < ended {
		t.Fatalf("setup.started at %d, setup.ended at %d, turn.started at %d; want them in that order", started, ended, turn)
	}
	if data := string(evs[ended].Data); !strings.Contains(data, `"ok":true`) || !strings.Contains(data, `"exit_code":0`) {
		t.Errorf("setup.ended = %s; want ok, exit 0", data)
	}
	if out := eventIndex(evs, pool.EventSetupOutput); out < 0 || !strings.Contains(string(evs[out].Data), "prepared") {
		t.Errorf("no setup.output with the command's output")
	}
}

func TestCreateRefusesAnInvalidSetupFile(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, nil)
	if err := os.WriteFile(filepath.Join(e.repo, ".agentpool.json"), []byte(`{"copy": "x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := e.p.Create(context.Background(), pool.CreateRequest{Repo: e.repo, Agent: "fake"})
	if !errors.Is(err, pool.ErrInvalid) || !strings.Contains(err.Error(), ".agentpool.json") {
		t.Errorf("Create() error = %v; want ErrInvalid naming .agentpool.json", err)
	}
}

func TestMergeSquashesTheSession(t *testing.T) {
	slow := agenttest.Script{Turns: []agenttest.Turn{
		{Echo: true},
		{Steps: []agenttest.Step{{Chunk: "working"}, {WaitCancel: true}}},
	}}
	e := newEnv(t, map[string]any{"fake": providerEntry(slow)}, nil)
	git(t, e.repo, "branch", "release")
	ctx := context.Background()
	s := e.session("fake")
	e.prompt(s.ID, "", "add a greeting\nwith two lines")
	if err := os.WriteFile(filepath.Join(s.Worktree.Path, "greeting.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	if _, err := e.p.Merge(ctx, s.ID, pool.MergeRequest{Squash: true, Rebase: true}); !errors.Is(err, pool.ErrInvalid) {
		t.Errorf("Merge(squash, rebase) error = %v; want ErrInvalid", err)
	}
	sub, err := e.p.Subscribe(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "long"}); err != nil {
		t.Fatal(err)
	}
	nextOfType(t, sub, backends.EventMessageChunk)
	if _, err := e.p.Merge(ctx, s.ID, pool.MergeRequest{Squash: true}); !errors.Is(err, pool.ErrBusy) {
		t.Errorf("Merge() during a turn error = %v; want ErrBusy", err)
	}
	if err := e.p.Cancel(ctx, s.ID); err != nil {
		t.Fatal(err)
	}

	res, err := e.p.Merge(ctx, s.ID, pool.MergeRequest{Into: "release", Squash: true})
	if err != nil {
		t.Fatalf("Merge() error = %v", err)
	}
	if res.Session != s.ID || res.Method != "squash" || !res.Committed || res.Into != "release" {
		t.Errorf("Merge() = %+v; want the session squashed into release", res)
	}
	msg := git(t, e.repo, "log", "-1", "--format=%B", "release")
	for _, want := range []string{"agentpool session " + s.ID, "Prompts:", "- add a greeting with two lines", "- long", "Session: " + s.ID} {
		if !strings.Contains(msg, want) {
			t.Errorf("squash message lacks %q:\n%s", want, msg)
		}
	}
	if got := git(t, e.repo, "show", "release:greeting.txt"); got != "hello\n" {
		t.Errorf("release:greeting.txt = %q", got)
	}
	if i := eventIndex(e.events(s.ID), pool.EventSessionMerged); i < 0 {
		t.Error("no session.merged event")
	}

	// A closed session's branch can still be merged, not rebased.
	if _, err := e.p.Close(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Merge(ctx, s.ID, pool.MergeRequest{Rebase: true}); !errors.Is(err, pool.ErrClosed) {
		t.Errorf("Merge(rebase) of a closed session error = %v; want ErrClosed", err)
	}
	if res, err := e.p.Merge(ctx, s.ID, pool.MergeRequest{Into: "release"}); err != nil || res.Method != "merge" {
		t.Errorf("Merge() of the closed session into release = %+v, %v; want a merge commit", res, err)
	}
}
