package store

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jmoiron/sqlx"
)

type appliedRow struct {
	Version   int64  `db:"version"`
	Name      string `db:"name"`
	AppliedAt int64  `db:"applied_at"`
}

func applied(t *testing.T, db *sqlx.DB) []appliedRow {
	t.Helper()
	var rows []appliedRow
	if err := db.SelectContext(context.Background(), &rows,
		`SELECT version, name, applied_at FROM schema_migrations ORDER BY version`); err != nil {
		t.Fatalf("select schema_migrations: %v", err)
	}
	return rows
}

func TestMigrationsAppliedOnceAndRecorded(t *testing.T) {
	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "agentpool.db")
	s, _ := openTest(t, Config{Path: path, Now: clock.Now})
	embedded, err := readMigrations(migrationFS)
	if err != nil {
		t.Fatalf("readMigrations(embedded) error = %v", err)
	}
	var want []appliedRow
	for _, m := range embedded {
		want = append(want, appliedRow{Version: m.version, Name: m.name, AppliedAt: toUnix(clock.Now())})
	}
	if len(want) == 0 || want[0].Name != "0001_init.sql" {
		t.Fatalf("embedded migrations = %+v; want 0001_init.sql first", want)
	}
	if diff := cmp.Diff(want, applied(t, s.db)); diff != "" {
		t.Errorf("schema_migrations after first Open (-want +got):\n%s", diff)
	}
	mustSession(t, s, "kept")
	if err := s.Close(); err != nil {
		t.Fatalf("Close() error = %v", err)
	}

	clock.Advance(time.Hour)
	s2, _ := openTest(t, Config{Path: path, Now: clock.Now})
	if diff := cmp.Diff(want, applied(t, s2.db)); diff != "" {
		t.Errorf("schema_migrations after reopen (-want +got):\n%s", diff)
	}
	if _, err := s2.GetSession(context.Background(), "kept"); err != nil {
		t.Errorf("GetSession(%q) after reopen error = %v; want nil", "kept", err)
	}
}

// rawDB opens a database file with the store's DSN but no migrations.
func rawDB(t *testing.T) *sqlx.DB {
	t.Helper()
	dsn, err := dataSourceName(filepath.Join(t.TempDir(), "raw.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlx.Open("sqlite3", dsn)
	if err != nil {
		t.Fatalf("sqlx.Open(%q) error = %v", dsn, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestMigrateAppliesOnlyNewInOrder(t *testing.T) {
	ctx := context.Background()
	db := rawDB(t)
	clock := newTestClock()
	first := fstest.MapFS{
		"migrations/0001_a.sql": {Data: []byte(`CREATE TABLE m_a (x INTEGER);`)},
	}
	if err := migrate(ctx, db, first, clock.Now); err != nil {
		t.Fatalf("migrate(first) error = %v", err)
	}
	// Every file fails if run twice (CREATE TABLE without IF NOT EXISTS);
	// version 10 must run after version 2 although "0010" < "2" as text,
	// since it needs the table of version 2.
	second := fstest.MapFS{
		"migrations/0001_a.sql":  first["migrations/0001_a.sql"],
		"migrations/0010_c.sql":  {Data: []byte(`INSERT INTO m_b (y) VALUES (1); CREATE TABLE m_c (z INTEGER);`)},
		"migrations/2_b.sql":     {Data: []byte(`CREATE TABLE m_b (y INTEGER);`)},
		"migrations/README.txt":  {Data: []byte(`not a migration`)},
		"migrations/0003_d.sql~": {Data: []byte(`garbage`)},
	}
	clock.Advance(time.Minute)
	for i := range 2 {
		if err := migrate(ctx, db, second, clock.Now); err != nil {
			t.Fatalf("migrate(second) run %d error = %v", i+1, err)
		}
	}
	first0, later := toUnix(clock.Now().Add(-time.Minute)), toUnix(clock.Now())
	want := []appliedRow{
		{Version: 1, Name: "0001_a.sql", AppliedAt: first0},
		{Version: 2, Name: "2_b.sql", AppliedAt: later},
		{Version: 10, Name: "0010_c.sql", AppliedAt: later},
	}
	if diff := cmp.Diff(want, applied(t, db)); diff != "" {
		t.Errorf("schema_migrations (-want +got):\n%s", diff)
	}
	var n int
	if err := db.GetContext(ctx, &n, `SELECT count(*) FROM m_b`); err != nil || n != 1 {
		t.Errorf("rows in m_b = %d (err %v); want 1", n, err)
	}
}

func TestMigrateFailureRollsBack(t *testing.T) {
	ctx := context.Background()
	db := rawDB(t)
	bad := fstest.MapFS{
		"migrations/0100_ok.sql":  {Data: []byte(`CREATE TABLE m_ok (x INTEGER);`)},
		"migrations/0101_bad.sql": {Data: []byte(`CREATE TABLE m_half (x INTEGER); SELECT nope FROM missing_table;`)},
	}
	err := migrate(ctx, db, bad, time.Now)
	if err == nil || !strings.Contains(err.Error(), "0101_bad.sql") {
		t.Fatalf("migrate(bad) error = %v; want an error naming 0101_bad.sql", err)
	}
	var half, recorded int
	if err := db.GetContext(ctx, &half, `SELECT count(*) FROM sqlite_schema WHERE name = 'm_half'`); err != nil {
		t.Fatal(err)
	}
	if err := db.GetContext(ctx, &recorded, `SELECT count(*) FROM schema_migrations`); err != nil {
		t.Fatal(err)
	}
	if half != 0 || recorded != 1 {
		t.Errorf("after failed migration: m_half tables = %d, recorded = %d; want 0 and 1 (only 0100)", half, recorded)
	}
}

func TestReadMigrationsRejectsBadNames(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		want  string
	}{
		{"no version", []string{"migrations/init.sql"}, "init.sql: name must start"},
		{"zero version", []string{"migrations/0_init.sql"}, "0_init.sql: name must start"},
		{"duplicate version", []string{"migrations/1_a.sql", "migrations/001_b.sql"}, "already used"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for _, f := range tt.files {
				fsys[f] = &fstest.MapFile{Data: []byte("SELECT 1;")}
			}
			_, err := readMigrations(fsys)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("readMigrations(%v) error = %v; want one containing %q", tt.files, err, tt.want)
			}
		})
	}
}
