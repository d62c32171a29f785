package pool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// trustSetup trusts the setup file of the env's repository as it is.
func (e *env) trustSetup() {
	e.t.Helper()
	ctx := context.Background()
	sf, err := e.wt.SetupFileOf(ctx, e.repo)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := e.wt.Trust(ctx, e.repo, sf.SHA256); err != nil {
		e.t.Fatal(err)
	}
}

func TestUntrustedSetupRunsOnlyOnceTrusted(t *testing.T) {
	slow := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "working"}, {WaitCancel: true}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(slow)}, nil)
	ctx := context.Background()
	setup := `{"setup": {"command": ["sh", "-c", "echo ran > ran.txt"]}}`
	if err := os.WriteFile(filepath.Join(e.repo, ".agentpool.json"), []byte(setup), 0o644); err != nil {
		t.Fatal(err)
	}
	s := e.session("fake")
	e.waitEvent(s.ID, pool.EventSetupUntrusted)
	if _, err := os.Stat(filepath.Join(s.Worktree.Path, "ran.txt")); err == nil {
		t.Fatal("the untrusted setup ran")
	}
	if err := e.p.RunSetup(ctx, s.ID); !errors.Is(err, pool.ErrConflict) || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("RunSetup() untrusted = %v; want ErrConflict saying it is not trusted", err)
	}
	e.trustSetup()

	// Refused while a turn runs.
	if _, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "work"}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent(s.ID, "turn.started")
	if err := e.p.RunSetup(ctx, s.ID); !errors.Is(err, pool.ErrBusy) {
		t.Errorf("RunSetup() during a turn = %v; want ErrBusy", err)
	}
	if err := e.p.Cancel(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	e.waitEvent(s.ID, "turn.ended")

	if err := e.p.RunSetup(ctx, s.ID); err != nil {
		t.Fatalf("RunSetup() trusted = %v", err)
	}
	e.waitEvent(s.ID, pool.EventSetupEnded)
	if b, err := os.ReadFile(filepath.Join(s.Worktree.Path, "ran.txt")); err != nil || string(b) != "ran\n" {
		t.Errorf("ran.txt = %q, %v; want the trusted setup's work", b, err)
	}

	if _, err := e.p.Close(ctx, s.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := e.p.RunSetup(ctx, s.ID); !errors.Is(err, pool.ErrClosed) {
		t.Errorf("RunSetup() closed = %v; want ErrClosed", err)
	}
}
