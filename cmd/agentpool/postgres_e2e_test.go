package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/internal/pgtest"
)

// TestEndToEndPostgresStore: `serve` with $AGENTPOOL_STORE naming a
// PostgreSQL database keeps its state there, not in a SQLite file: a
// session with the demo agent, a prompt whose events stream to the CLI, a
// restart of the daemon, and the session's history is whole, its seqs
// gap-free, the second turn numbered after the first.
func TestEndToEndPostgresStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	url := startPostgres(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# project\n"})

	// A password in the URL is refused before the daemon starts.
	refused := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--store", "postgres://agentpool:secret@127.0.0.1/agentpool")
	refused.Env = append(os.Environ(), "AGENTPOOL_HOME="+home)
	b, err := refused.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "carries a password") {
		t.Fatalf("serve --store with a password: %v\n%s", err, b)
	}

	// Without the cluster key the hosts present to each other, too.
	nokey := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--store", url)
	nokey.Env = append(os.Environ(), "AGENTPOOL_HOME="+home, clusterKeyEnv+"=")
	if b, err := nokey.CombinedOutput(); err == nil || !strings.Contains(string(b), "--cluster-key-file") {
		t.Fatalf("serve --store without a cluster key: %v\n%s", err, b)
	}

	key := clusterKeyEnv + "=" + clusterKeyFile(t)
	d := startDaemon(t, bin, home, "AGENTPOOL_STORE="+url, key)
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "demo")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`session (\S+) created`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("session new output has no id:\n%s", out)
	}
	id := m[1]
	out = d.promptApproved(id, "add a greeting")
	if !strings.Contains(out, "end_turn") {
		t.Errorf("prompt output lacks the turn's end (events streamed from the daemon):\n%s", out)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("daemon exit: %v\n%s", err, d.out)
	}
	if _, err := os.Stat(filepath.Join(home, databaseFile)); !os.IsNotExist(err) {
		t.Errorf("Stat(%s) error = %v; want no SQLite file with the store on PostgreSQL", databaseFile, err)
	}

	d = startDaemon(t, bin, home, "AGENTPOOL_STORE="+url, key)
	out = d.promptApproved(id, "and a second one")
	if !strings.Contains(out, "end_turn") {
		t.Errorf("second prompt output lacks the turn's end:\n%s", out)
	}
	evs, err := d.client.EventLog(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ended []int64
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event log has a gap at %d: seq %d", i, ev.Seq)
		}
		if ev.Type == backends.EventTurnEnded {
			ended = append(ended, ev.Turn)
		}
	}
	if len(ended) != 2 || ended[0] != 1 || ended[1] != 2 {
		t.Errorf("turn.ended events of turns %v; want turns 1 and 2 (the first from before the restart)", ended)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("daemon exit: %v\n%s", err, d.out)
	}
	waitNoProcesses(t, bin, "processes after shutdown")
}

// errString is err's message, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// startPostgres starts a throwaway PostgreSQL cluster for the test (it
// skips without PostgreSQL, fails under CI=true) and returns the URL of a
// new database in it; the cluster is removed at cleanup.
func startPostgres(t testing.TB) string {
	t.Helper()
	cluster, err := pgtest.Start()
	agenttest.RequireFeature(t, err == nil, "PostgreSQL: "+errString(err))
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Errorf("stop PostgreSQL: %v", err)
		}
	})
	url, err := cluster.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return url
}
