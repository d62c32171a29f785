package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
)

var shared *Shared

func TestMain(m *testing.M) {
	os.Exit(Main(func(sh *Shared) int { shared = sh; return m.Run() }))
}

func TestDatabase(t *testing.T) {
	url := shared.Database(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("Connect(%q) error = %v", url, err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v; want 1, nil", one, err)
	}
}

// TestReapStale: a cluster whose owner file names a process that has
// ended is stopped and removed by the next reapStale; one whose owner
// runs (this test) is kept.
func TestReapStale(t *testing.T) {
	if shared.err != nil {
		t.Skip("no PostgreSQL:", shared.err)
	}
	dead, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	live, err := Start()
	if err != nil {
		dead.Stop()
		t.Fatal(err)
	}
	defer live.Stop()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	owner := fmt.Sprintf("%d %d\n", gone.Process.Pid, uint64(1))
	if err := os.WriteFile(filepath.Join(dead.dir, ownerFile), []byte(owner), 0o600); err != nil {
		t.Fatal(err)
	}
	reapStale(dead.bin)
	if _, err := os.Stat(dead.dir); !os.IsNotExist(err) {
		t.Errorf("the cluster of an ended process is still there: %v", err)
		dead.Stop()
	}
	ctx := context.Background()
	if conn, err := pgx.Connect(ctx, dead.URL("postgres")); err == nil {
		conn.Close(ctx)
		t.Error("the server of an ended process still answers")
	}
	conn, err := pgx.Connect(ctx, live.URL("postgres"))
	if err != nil {
		t.Fatalf("the cluster of a running process was stopped: %v", err)
	}
	conn.Close(ctx)
}
