package pgtest

import (
	"context"
	"os"
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
