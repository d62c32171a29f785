package main

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/agentpool/agentpool/pool"
)

// TestSessionNewWarm: session new asks the daemon to start the agent at
// once, and --no-warm asks it not to, over the API's "warm" field.
func TestSessionNewWarm(t *testing.T) {
	e := newCLIEnv(t)
	repo := t.TempDir()
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	reqs := make(chan pool.CreateRequest, 2)
	create := e.fp.CreateFunc
	e.fp.CreateFunc = func(ctx context.Context, r pool.CreateRequest) (pool.Session, error) {
		reqs <- r
		return create(ctx, r)
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"session", "new", "--repo", repo}, true},
		{[]string{"session", "new", "--repo", repo, "--no-warm"}, false},
	} {
		if _, _, err := e.run(t, t.Context(), false, false, "", tc.args...); err != nil {
			t.Fatalf("%q error = %v", tc.args, err)
		}
		r := <-reqs
		if r.Warm == nil {
			t.Errorf("%q sent no warm; want %v", tc.args, tc.want)
		} else if *r.Warm != tc.want {
			t.Errorf("%q sent warm %v; want %v", tc.args, *r.Warm, tc.want)
		}
	}
}
