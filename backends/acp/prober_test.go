package acp_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// recordingJail is a backends.Jail that confines nothing and records what
// the backend did with it.
type recordingJail struct {
	mu       sync.Mutex
	dir      string // the Dir of the prepared command
	released int
}

func (j *recordingJail) Prepare(cmd *exec.Cmd) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.dir = cmd.Dir
	return nil
}

func (j *recordingJail) Kill() error { return nil }

func (j *recordingJail) Release() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.released++
	return nil
}

func (j *recordingJail) Describe() backends.Confinement {
	return backends.Confinement{Containment: "test"}
}

// A probe whose jail cannot be made fails without running the agent: a
// provider's code never runs unconfined because its sandbox failed.
func TestProberJailFailureRunsNothing(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	spec := agenttest.Spec("p", agenttest.Script{StartSteps: []agenttest.Step{
		{Sys: &agenttest.SysOp{Op: agenttest.OpWrite, Path: marker, Content: "x"}}}})
	refused := errors.New("no jail today")
	p := acp.Prober{Jail: func(backends.Spec) (acp.ProbeJail, error) { return acp.ProbeJail{}, refused }}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := p.Probe(ctx, spec); !errors.Is(err, refused) {
		t.Fatalf("probe error = %v, want the jail's", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the agent ran although its probe jail could not be made")
	}
}

// A probe starts its agent in the jail the hook makes for the probe's own
// directory, releases it when done, and a failed start goes through the
// jail's Explain.
func TestProberUsesItsJail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var (
		jail     recordingJail
		hookDir  string
		released int
	)
	p := acp.Prober{Jail: func(spec backends.Spec) (acp.ProbeJail, error) {
		hookDir = spec.Dir
		return acp.ProbeJail{Jail: &jail, Release: func() { released++ },
			Explain: func(err error) error { return fmt.Errorf("explained: %w", err) }}, nil
	}}
	info, err := p.Probe(ctx, agenttest.Spec("p", agenttest.Script{}))
	if err != nil {
		t.Fatal(err)
	}
	if hookDir == "" || jail.dir != hookDir {
		t.Errorf("agent started in %q, the jail was made for %q", jail.dir, hookDir)
	}
	if _, err := os.Stat(hookDir); err == nil {
		t.Errorf("the probe's directory %s was left behind", hookDir)
	}
	if info.Confinement.Containment != "test" {
		t.Errorf("probe info does not say how the agent was confined: %+v", info.Confinement)
	}
	if released != 1 || jail.released == 0 {
		t.Errorf("probe released its jail %d times (backend: %d), want once", released, jail.released)
	}

	_, err = p.Probe(ctx, agenttest.Spec("p", agenttest.Script{ExitBeforeHandshake: intp(3)}))
	if err == nil || !strings.Contains(err.Error(), "explained: ") {
		t.Fatalf("failed probe error = %v, want it explained", err)
	}
	if released != 2 {
		t.Errorf("a failed probe did not release its jail (%d releases)", released)
	}
}
