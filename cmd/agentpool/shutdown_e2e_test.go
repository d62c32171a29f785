package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/pool"
)

// TestSIGTERMWithHungClient sends SIGTERM to the daemon while two turns
// wait for a permission nobody answers and a client has sent half a
// request it never finishes: the daemon exits 0 within ShutdownBound and
// leaves no agent process.
func TestSIGTERMWithHungClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, t.TempDir(), map[string]string{"README.md": "# hung client\n"})

	d := startDaemon(t, bin, home)
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = d.cmd.Process.Kill()
			_ = d.cmd.Wait()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for range 2 {
		s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "demo"})
		if err != nil {
			t.Fatalf("CreateSession: %v\n%s", err, d.out)
		}
		if _, err := d.client.Prompt(ctx, s.ID, "", "add a greeting", false); err != nil {
			t.Fatalf("Prompt: %v\n%s", err, d.out)
		}
		for {
			p, err := d.client.Permissions(ctx, s.ID)
			if err != nil {
				t.Fatalf("Permissions: %v", err)
			}
			if len(p) > 0 {
				break // the turn waits for an answer that never comes
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	before := len(processesOf(bin)) - 1 // the daemon itself
	t.Logf("agent processes before SIGTERM: %d", before)
	if before < 2 {
		t.Fatalf("%d agent processes running; want at least 2 (one per session)", before)
	}

	// A client that sends the headers and the start of a body, then nothing.
	conn, err := net.Dial("tcp", strings.TrimPrefix(d.client.BaseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/sessions HTTP/1.1\r\nHost: agentpool\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"repo\": ", d.client.Token)
	time.Sleep(300 * time.Millisecond) // the handler is reading the body

	begin := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- d.cmd.Wait() }()
	select {
	case err = <-waitErr:
		exited = true
	case <-time.After(60 * time.Second):
		t.Fatalf("the daemon did not exit within 60 s of SIGTERM:\n%s", d.out)
	}
	took := time.Since(begin)
	after := len(processesOf(bin))
	t.Logf("exit %v after %v (documented bound %v); processes of the binary right after: %d", err, took.Round(time.Millisecond), ShutdownBound, after)
	if err != nil {
		t.Errorf("daemon exit = %v; want status 0\n%s", err, d.out)
	}
	// Generous: a slow machine may take longer than the bound.
	if limit := ShutdownBound + 5*time.Second; took > limit {
		t.Errorf("the daemon took %v to exit; want within %v (the documented bound is %v)", took, limit, ShutdownBound)
	}
	if after != 0 {
		t.Errorf("%d processes of the binary alive right after the daemon exited; want 0", after)
	}
	waitNoProcesses(t, bin, "processes after SIGTERM")
}
