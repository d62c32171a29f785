package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/internal/pgtest"
)

// pgCluster is the throwaway PostgreSQL cluster of this test binary run
// (see pgtest.Main); each test takes a database of its own in it.
var pgCluster *pgtest.Shared

func TestMain(m *testing.M) {
	os.Exit(pgtest.Main(func(sh *pgtest.Shared) int {
		pgCluster = sh
		code := m.Run()
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
				code = 1
			}
		}
		return code
	}))
}

// testEngine is an engine the store's behaviour tests run on.
type testEngine struct {
	name     string
	postgres bool
}

// testEngines are SQLite and PostgreSQL.
var testEngines = []testEngine{{name: "sqlite"}, {name: "postgres", postgres: true}}

// forEachEngine runs f as a subtest on each engine.
func forEachEngine(t *testing.T, f func(t *testing.T, e testEngine)) {
	t.Helper()
	for _, e := range testEngines {
		t.Run(e.name, func(t *testing.T) { f(t, e) })
	}
}

// db returns cfg placed on a new database of e: a file in t.TempDir(), or
// a database of its own in the test cluster (skipped without one). Open it
// again with the same Config to reopen the same database.
func (e testEngine) db(t testing.TB, cfg Config) Config {
	t.Helper()
	if e.postgres {
		cfg.URL = pgCluster.Database(t)
		return cfg
	}
	cfg.Path = filepath.Join(t.TempDir(), "agentpool.db")
	return cfg
}

// testClock is an injected clock that moves only when told.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock {
	return &testClock{t: time.Date(2025, 3, 4, 5, 6, 7, 890123456, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// logBuffer collects log output safely from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// openTest opens a store on a file in t.TempDir() (unless cfg.Path or
// cfg.URL is set),
// logging into the returned buffer, and closes it at the end of the test.
func openTest(t testing.TB, cfg Config) (*Store, *logBuffer) {
	t.Helper()
	if cfg.Path == "" && cfg.URL == "" {
		cfg.Path = filepath.Join(t.TempDir(), "agentpool.db")
	}
	logs := &logBuffer{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open(%q%s) error = %v; want nil", cfg.Path, cfg.URL, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, logs
}

// mustSession creates a session row or fails the test.
func mustSession(t testing.TB, s *Store, id string) Session {
	t.Helper()
	sess, err := s.CreateSession(context.Background(), Session{ID: id, Repo: "/repo/" + id})
	if err != nil {
		t.Fatalf("CreateSession(%q) error = %v; want nil", id, err)
	}
	return sess
}

// lockDB takes SQLite's write lock on the database at path from another
// connection, as another process would, and returns the function that
// releases it. Writers of the store then fail with "database is locked"
// once their busy timeout passes.
func lockDB(t *testing.T, path string) (release func()) {
	t.Helper()
	ctx := context.Background()
	dsn, err := dataSourceName(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		t.Fatalf("sql.Open(%q) error = %v", dsn, err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("db.Conn() error = %v", err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("BEGIN IMMEDIATE error = %v", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, err := conn.ExecContext(ctx, "ROLLBACK")
			err = errors.Join(err, conn.Close(), db.Close())
			if err != nil {
				t.Errorf("release lock: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// waitFor polls cond every millisecond for up to 10 s; it is for states
// reached through the database, which has no event to wait on.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// at returns cfg on the database loc names (see testEngine.db).
func at(loc, cfg Config) Config {
	cfg.Path, cfg.URL = loc.Path, loc.URL
	return cfg
}
