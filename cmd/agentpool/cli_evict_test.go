package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/httpapi/apitest"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
)

// evictingPool is the fake pool with an Evict: session s1's agent demo is
// idle, s1's agent busy runs a turn, nothing else runs.
type evictingPool struct {
	*apitest.Pool
	evicted []string
}

func (p *evictingPool) Evict(_ context.Context, session, agent string) error {
	switch {
	case session == "s1" && agent == "demo":
		p.evicted = append(p.evicted, session+"/"+agent)
		return nil
	case session == "s1" && agent == "busy":
		return fmt.Errorf("agent %q of session %q is running a turn; cancel it, or evict the agent once it is idle: %w", agent, session, pool.ErrBusy)
	}
	return fmt.Errorf("no warm agent %q in session %q: %w", agent, session, pool.ErrNotFound)
}

func TestEvictCommand(t *testing.T) {
	home := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg, err := registry.New(registry.Config{Path: filepath.Join(home, "providers.json"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	fp := &evictingPool{Pool: &apitest.Pool{GetFunc: func(_ context.Context, id string) (pool.Session, error) {
		switch id {
		case "s1":
			return pool.Session{ID: id, ActiveAgent: "demo", Status: pool.StatusOpen}, nil
		case "s3":
			return pool.Session{ID: id, Status: pool.StatusOpen}, nil
		}
		return pool.Session{}, fmt.Errorf("no session %s: %w", id, pool.ErrNotFound)
	}}}
	srv, err := httpapi.New(httpapi.Config{Pool: fp, Registry: reg, Token: cliTestToken, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { srv.Shutdown(); ts.Close(); _ = reg.Close() })
	if err := writeDaemonFile(home, daemonInfo{Addr: ts.Listener.Addr().String(), PID: os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, tokenFileName), []byte(cliTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		handled, err := runClient(t.Context(), args[0], args[1:], ClientEnv{Home: home}, strings.NewReader(""), &out, &errOut)
		if !handled {
			t.Fatalf("runClient(%q) not handled", args)
		}
		return out.String(), err
	}

	if out, err := run("evict", "s1", "demo"); err != nil || out != "agent demo of session s1 evicted\n" || len(fp.evicted) != 1 {
		t.Errorf("evict s1 demo = %q, %v (evicted %q); want it evicted and said", out, err, fp.evicted)
	}
	// Without AGENT: the session's agent.
	if out, err := run("evict", "s1"); err != nil || out != "agent demo of session s1 evicted\n" || len(fp.evicted) != 2 {
		t.Errorf("evict s1 = %q, %v (evicted %q); want its active agent demo evicted and said", out, err, fp.evicted)
	}
	if out, err := run("evict", "--help"); err != nil || !strings.HasPrefix(out, "Usage: agentpool evict SESSION [AGENT]") {
		t.Errorf("evict --help = %q, %v; want the usage", out, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"evict"}, "wrong number of arguments"},
		{[]string{"evict", "s3"}, "session s3 has no active agent: name the agent"},
		{[]string{"evict", "s1", "demo", "x"}, "wrong number of arguments"},
		{[]string{"evict", "s1", "busy"}, "running a turn; cancel it"},
		{[]string{"evict", "s2", "demo"}, `no warm agent "demo" in session "s2"`},
	} {
		if _, err := run(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q error = %v; want %q", tc.args, err, tc.want)
		}
	}
	if len(fp.evicted) != 2 {
		t.Errorf("evicted %q; want only s1/demo, twice", fp.evicted)
	}
}
