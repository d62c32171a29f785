package main

import (
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// TestAgentWorldPostgres: a daemon that keeps its state in PostgreSQL,
// with PGPASSWORD and PGHOST (the server's socket directory) in its
// environment: its agents see neither variable, and the server's socket
// is not in their view (ENOENT).
//
// Under Landlock alone the socket was reachable: connect(2) to a path
// socket is not mediated, and a root daemon's agent, which kept its
// capabilities, passed the socket directory's mode.
func TestAgentWorldPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	store := startPostgres(t)
	u, err := url.Parse(store)
	if err != nil {
		t.Fatal(err)
	}
	dir := u.Query().Get("host")
	sock := filepath.Join(dir, ".s.PGSQL."+u.Query().Get("port"))
	if c, err := net.DialTimeout("unix", sock, 2*time.Second); err != nil {
		t.Fatalf("the server's socket does not answer the host: %v", err)
	} else {
		_ = c.Close()
	}
	w := newWorld(t)
	attacks := w.prepare(t, func(t *testing.T, w *world) worldAttack {
		return worldAttack{
			name: "postgres",
			steps: []agenttest.Step{
				sys(agenttest.SysOp{Op: agenttest.OpEnv, Names: []string{"PG*", "DATABASE_URL"}}),
				connectUnix(sock),
				shell(absentLine(dir)),
			},
			check: func(t *testing.T, w *world, id string, chunks []string) {
				got := checkSys(t, chunks, sysWant{"env", "ok", ""}, sysWant{"connect", "ENOENT", ""}, sysWant{"exec", "ok", absentOutput(dir)})
				if got[0].Data != "" {
					t.Errorf("the agent sees the daemon's store variables:\n%s", got[0].Data)
				}
			},
		}
	})
	w.start(t, "PGPASSWORD=store-password-"+randomName(), "PGHOST="+dir,
		"AGENTPOOL_STORE="+store, clusterKeyEnv+"="+clusterKeyFile(t))
	w.requireNamespaces(t)
	w.attack(t, attacks)
}
