// Package pgtest starts a throwaway PostgreSQL cluster for tests: one per
// test binary run, started from TestMain, reached only through a unix
// socket in its own temporary directory, and removed by Stop. Each test
// takes a database of its own in it (Database).
//
// PostgreSQL refuses to run as root, so the cluster runs as the user
// "postgres" (through runuser) when the tests run as root; otherwise as the
// test's own user.
//
// Two settings help study what the tests and benchmarks make the server
// do: $AGENTPOOL_PGTEST_OPTS adds server settings to its command line
// (e.g. "-c log_min_duration_statement=0" logs every statement with its
// time; pg_ctl hands that line to a shell, so a value with a shell's
// characters, such as "|", must be quoted within it), and
// $AGENTPOOL_PGTEST_KEEPLOG=FILE copies the server's log there when the
// cluster stops.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// port names the cluster's socket file (.s.PGSQL.<port>); no TCP port is
// opened.
const port = 5432

// startTimeout bounds initdb and the server's start.
const startTimeout = 2 * time.Minute

// Cluster is a running throwaway cluster.
type Cluster struct {
	dir    string // the temporary directory: data/ and the socket
	bin    string // PostgreSQL's bin directory
	runAs  string // "postgres" when run through runuser, else ""
	nextDB atomic.Int64
	opts   string // the server's options, for Restart
}

// binDir finds PostgreSQL's server programs: on PATH, else the newest
// /usr/lib/postgresql/<version>/bin.
func binDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL server programs (initdb, pg_ctl) not found")
}

// The settings described in the package's doc.
const (
	optsEnv    = "AGENTPOOL_PGTEST_OPTS"
	keepLogEnv = "AGENTPOOL_PGTEST_KEEPLOG"
)

// ownerFile, in a cluster's directory, holds the pid and start time (see
// procStart) of the test process that started it.
const ownerFile = "owner"

// dirPattern matches the clusters' directories in the temporary directory.
const dirPattern = "agentpool-pgtest-*"

// Start initialises and starts a cluster in a new temporary directory,
// first stopping and removing the clusters left by test processes that
// are gone (killed, or timed out, before their Stop).
func Start() (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	reapStale(bin)
	dir, err := os.MkdirTemp("", "agentpool-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(fmt.Sprintf("%d %d\n", os.Getpid(), procStart(os.Getpid()))), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &Cluster{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: running as root, and no user postgres to run the server: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		c.runAs = "postgres"
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	data := filepath.Join(dir, "data")
	if err := c.run(ctx, "initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	opts := fmt.Sprintf("-c listen_addresses='' -c unix_socket_directories=%s -c port=%d -c max_connections=200 %s", dir, port, os.Getenv(optsEnv))
	c.opts = opts
	if err := c.run(ctx, "pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "120", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w\n%s", err, log)
	}
	return c, nil
}

// run runs one of PostgreSQL's programs, as the cluster's user.
func (c *Cluster) run(ctx context.Context, prog string, args ...string) error {
	path := filepath.Join(c.bin, prog)
	var cmd *exec.Cmd
	if c.runAs != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.runAs, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = c.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgtest: %s: %w\n%s", prog, err, out.Bytes())
	}
	return nil
}

// Stop stops the server (fast shutdown: connections are cut) and removes
// its directory.
func (c *Cluster) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	err := c.run(ctx, "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "fast", "-w", "stop")
	if p := os.Getenv(keepLogEnv); p != "" {
		b, rerr := os.ReadFile(filepath.Join(c.dir, "server.log"))
		err = errors.Join(err, rerr, os.WriteFile(p, b, 0o600))
	}
	return errors.Join(err, os.RemoveAll(c.dir))
}

// Restart stops the server (fast shutdown: connections are cut), waits
// down, and starts it again with its data: a server restarting under its
// clients.
func (c *Cluster) Restart(down time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	data := filepath.Join(c.dir, "data")
	if err := c.run(ctx, "pg_ctl", "-D", data, "-m", "fast", "-w", "stop"); err != nil {
		return err
	}
	time.Sleep(down)
	return c.run(ctx, "pg_ctl", "-D", data, "-o", c.opts, "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "120", "start")
}

// URL returns the URL of database db in the cluster (no password: the
// cluster trusts its socket, which only root and the server's user reach).
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres:///%s?host=%s&port=%d&user=postgres&sslmode=disable", db, c.dir, port)
}

// NewDatabase creates a new, empty database and returns its URL.
func (c *Cluster) NewDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), c.nextDB.Add(1))
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgtest: create database: %w", err)
	}
	return c.URL(name), nil
}

// DropDatabase removes the database name, cutting its connections.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgtest: drop database: %w", err)
	}
	return nil
}

// Shared is the cluster of a test binary run, started by TestMain through
// Main.
type Shared struct {
	c   *Cluster
	err error
}

// Main starts a cluster, runs the tests and stops it, returning m.Run's
// code: call it from TestMain. A cluster that cannot start makes the tests
// that need it skip (fail under CI=true, see Database).
func Main(run func(*Shared) int) int {
	c, err := Start()
	sh := &Shared{c: c, err: err}
	code := run(sh)
	if c != nil {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stop cluster:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Database returns the URL of a new database of the shared cluster for t,
// dropped when t ends; without a cluster it skips t (fails it under
// CI=true).
func (sh *Shared) Database(t testing.TB) string {
	t.Helper()
	if sh == nil {
		agenttest.RequireFeature(t, false, "PostgreSQL (no cluster started)")
	}
	agenttest.RequireFeature(t, sh.err == nil, fmt.Sprintf("PostgreSQL: %v", sh.err))
	ctx := context.Background()
	url, err := sh.c.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	name := dbName(url)
	t.Cleanup(func() {
		if err := sh.c.DropDatabase(context.Background(), name); err != nil {
			t.Errorf("drop test database: %v", err)
		}
	})
	return url
}

// dbName is the database a URL of this package names.
func dbName(url string) string {
	rest := url[len("postgres:///"):]
	for i := range rest {
		if rest[i] == '?' {
			return rest[:i]
		}
	}
	return rest
}

// reapStale stops (immediate shutdown) and removes every cluster in the
// temporary directory whose owner file, written by this user, names a
// test process that no longer runs (no such pid, or a pid reused by a
// process started at another time). A cluster without an owner file, or
// one another user's file names, is left alone. bin is PostgreSQL's bin
// directory.
func reapStale(bin string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern))
	for _, dir := range dirs {
		path := filepath.Join(dir, ownerFile)
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var pid int
		var start uint64
		if n, _ := fmt.Sscanf(string(b), "%d %d", &pid, &start); n != 2 || pid <= 0 {
			continue
		}
		if syscall.Kill(pid, 0) != syscall.ESRCH && procStart(pid) == start {
			continue // its test process still runs
		}
		c := &Cluster{dir: dir, bin: bin}
		if os.Geteuid() == 0 {
			c.runAs = "postgres"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = c.run(ctx, "pg_ctl", "-D", filepath.Join(dir, "data"), "-m", "immediate", "-w", "stop")
		cancel()
		_ = os.RemoveAll(dir)
	}
}

// procStart returns the start time of process pid (field 22 of
// /proc/PID/stat, in clock ticks since boot), 0 when it cannot be read.
func procStart(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}
