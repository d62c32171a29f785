package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// otherUser is a second local user, made for one test.
type otherUser struct {
	name     string
	uid, gid uint32
}

// newOtherUser creates a local user with useradd, removed with userdel -r
// when the test ends. It needs root, and skips without it.
func newOtherUser(t *testing.T) otherUser {
	t.Helper()
	requireRoot(t)
	_, err := exec.LookPath("useradd")
	agenttest.RequireFeature(t, err == nil, "useradd (passwd package)")
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "apown" + hex.EncodeToString(b)
	var out []byte
	for try := 0; try < 20; try++ { // other tests may hold /etc/passwd's lock
		if out, err = exec.Command("useradd", "-m", "-s", "/bin/sh", name).CombinedOutput(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		for try := 0; try < 20; try++ {
			out, err := exec.Command("userdel", "-r", name).CombinedOutput()
			if _, lerr := user.Lookup(name); err == nil || lerr != nil {
				return
			}
			if try == 19 {
				t.Errorf("userdel -r %s: %v\n%s", name, err, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return otherUser{name: name, uid: uint32(uid), gid: uint32(gid)}
}

// give chowns paths to u, as if u had made them.
func (u otherUser) give(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Lchown(p, int(u.uid), int(u.gid)); err != nil {
			t.Fatal(err)
		}
	}
}

// read tries to read path as u, and returns cat's error and output.
func (u otherUser) read(path string) (string, error) {
	cmd := exec.Command("cat", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// openBase returns a new directory that every user may enter (t.TempDir's
// are 0700, which would hide the files under test from other users
// whatever their own modes), removed when the test ends.
func openBase(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "agentpool-own-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	return mkdirMode(t, base, 0o755)
}

// startServeIn starts `agentpool serve` in directory dir with environment
// env, expecting it to keep its data in home; it is stopped when the test
// ends. Its output is read through the returned buffer, not d.out.
func startServeIn(t *testing.T, bin, dir, home string, env []string) (*daemon, *lockedBuffer) {
	t.Helper()
	d := &daemon{t: t, bin: bin, home: home, out: &bytes.Buffer{}}
	d.cmd = exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--log-level", "debug")
	d.cmd.Dir, d.cmd.Env = dir, env
	out := &lockedBuffer{b: d.out}
	d.cmd.Stdout, d.cmd.Stderr = out, out
	t.Cleanup(func() { removeCgroupTree(home) })
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	})
	d.connect(out)
	return d, out
}

// lockedBuffer is a bytes.Buffer that a running process and the test may
// use at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// plantedHome is a .agentpool that another user planted in a directory
// every user may write, and a project directory below it.
type plantedHome struct {
	shared, project, dir string
}

// plantHome makes u's .agentpool in a world-writable directory of base,
// with the files given (name → content), all u's and writable by all. The
// shared directory is sticky, as /tmp is, so that the .agentpool's owner is
// what makes it untrusted (a shared directory that is not sticky is refused
// for itself: see TestCheckTrusted).
func plantHome(t *testing.T, u otherUser, base string, files map[string]string) plantedHome {
	t.Helper()
	p := plantedHome{shared: mkdirMode(t, filepath.Join(base, "shared"), 0o777|fs.ModeSticky)}
	p.project = mkdirMode(t, filepath.Join(p.shared, "project"), 0o755)
	p.dir = mkdirMode(t, filepath.Join(p.shared, defaultHomeDir), 0o777)
	u.give(t, p.project, p.dir)
	for name, content := range files {
		path := writeMode(t, filepath.Join(p.dir, name), 0o666)
		if err := os.WriteFile(path, []byte(content), 0o666); err != nil {
			t.Fatal(err)
		}
		u.give(t, path)
	}
	return p
}

// A .agentpool that another user planted above the current directory is
// not the daemon's home: serve says why it ignores it and uses the
// per-user one, so the providers.json there never runs; named explicitly,
// it is refused.
func TestServeIgnoresAPlantedHome(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	u := newOtherUser(t)
	bin := agentpoolBinary(t)
	base := openBase(t)
	marker := filepath.Join(base, "planted-command-ran")
	planted := plantHome(t, u, base, map[string]string{providersFile: fmt.Sprintf(
		`{"version": 1, "providers": {"demo": {"command": ["/bin/sh", "-c", "touch %s"]}}}`, marker)})
	me := mkdirMode(t, filepath.Join(base, "me"), 0o700)
	home := filepath.Join(me, "state", userStateDir)
	d, log := startServeIn(t, bin, planted.project, home, userEnv(me, "XDG_STATE_HOME="+filepath.Join(me, "state")))

	want := fmt.Sprintf("ignoring %s: owned by uid %d (%s), not by you (uid 0)", planted.dir, u.uid, u.name)
	if !strings.Contains(log.String(), want) {
		t.Errorf("serve's output lacks %q:\n%s", want, log)
	}
	snap, err := d.client.Providers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	demo, ok := snap.Provider("demo")
	if snap.File != filepath.Join(home, providersFile) || !ok || len(demo.Command) == 0 || demo.Command[0] == "/bin/sh" {
		t.Errorf("providers = file %s, demo %v; want %s and the built-in demo", snap.File, demo.Command, filepath.Join(home, providersFile))
	}
	for _, name := range []string{databaseFile, tokenFileName, daemonFileName} {
		if _, err := os.Stat(filepath.Join(planted.dir, name)); err == nil {
			t.Errorf("serve wrote %s in the planted home", name)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the planted providers.json's command ran")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0")
	cmd.Dir, cmd.Env = planted.project, userEnv(me, "AGENTPOOL_HOME="+planted.dir)
	out, err := cmd.CombinedOutput()
	wantErr := fmt.Sprintf("refusing %s: owned by uid %d (%s)", planted.dir, u.uid, u.name)
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), wantErr) {
		t.Errorf("serve with AGENTPOOL_HOME=%s: %v\n%s\nwant it refused: %q", planted.dir, err, out, wantErr)
	}
	removeCgroupTree(planted.dir)
}

// tokenTrap is a listener that records every request it gets, with its
// Authorization header.
type tokenTrap struct {
	srv  *httptest.Server
	mu   sync.Mutex
	auth []string
}

func newTokenTrap(t *testing.T) *tokenTrap {
	tr := &tokenTrap{}
	tr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		tr.auth = append(tr.auth, r.Header.Get("Authorization"))
		tr.mu.Unlock()
		http.Error(w, "trap", http.StatusTeapot)
	}))
	t.Cleanup(tr.srv.Close)
	return tr
}

// requests returns the Authorization headers received so far.
func (tr *tokenTrap) requests() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.auth...)
}

// daemonJSON is a daemon.json that sends clients to tr.
func (tr *tokenTrap) daemonJSON() string {
	return fmt.Sprintf(`{"addr": %q, "pid": 0}`, strings.TrimPrefix(tr.srv.URL, "http://"))
}

// A daemon.json that another user planted never decides where the client
// sends its token.
func TestClientNeverFollowsAPlantedDaemonFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the client")
	}
	u := newOtherUser(t)
	bin := agentpoolBinary(t)
	base := openBase(t)
	trap := newTokenTrap(t)
	planted := plantHome(t, u, base, map[string]string{daemonFileName: trap.daemonJSON(), tokenFileName: "planted\n"})
	me := mkdirMode(t, filepath.Join(base, "me"), 0o700)
	for _, tt := range []struct {
		name, want string
		env        []string
	}{
		{"found above the current directory", "ignoring " + planted.dir + ": owned by uid",
			[]string{"AGENTPOOL_TOKEN=my-secret"}},
		{"named by AGENTPOOL_HOME", "refusing the data directory " + planted.dir + " (from $AGENTPOOL_HOME): owned by uid",
			[]string{"AGENTPOOL_HOME=" + planted.dir, "AGENTPOOL_TOKEN=my-secret"}},
		{"named by AGENTPOOL_HOME, token file", "refusing the data directory " + planted.dir,
			[]string{"AGENTPOOL_HOME=" + planted.dir}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, "ps")
			cmd.Dir, cmd.Env = planted.project, userEnv(me, tt.env...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tt.want) {
				t.Errorf("agentpool ps: %v\n%s\nwant it to fail saying %q", err, out, tt.want)
			}
			if got := trap.requests(); len(got) > 0 {
				t.Errorf("the planted daemon.json's address got requests with Authorization %q", got)
			}
		})
	}
}

// A providers.json that group or others may write is refused on hot
// reload, with a diagnostic naming it and why, and the last good config
// stays in force until the mode is fixed.
func TestHotReloadRefusesAWritableProvidersFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := filepath.Join(t.TempDir(), "home")
	d := startDaemon(t, bin, home)
	t.Cleanup(func() { _ = d.cmd.Process.Signal(syscall.SIGTERM); _ = d.cmd.Wait() })
	path := filepath.Join(home, providersFile)
	replace := func(content string, mode fs.FileMode) {
		t.Helper()
		tmp := writeMode(t, path+".new", mode)
		if err := os.WriteFile(tmp, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	waitProviders := func(what string, ok func(enabled bool, diag string) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			snap, err := d.client.Providers(context.Background())
			g, found := snap.Provider("gemini")
			if err == nil && found && ok(g.Enabled, snap.Diagnostic) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: providers = gemini enabled %v, diagnostic %q, %v", what, g.Enabled, snap.Diagnostic, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	replace(`{"version": 1, "providers": {"gemini": {"enabled": false}}}`, 0o600)
	waitProviders("a file of the daemon's user only", func(on bool, diag string) bool { return !on && diag == "" })

	replace(`{"version": 1, "providers": {"gemini": {"enabled": true}}}`, 0o660)
	want := "refusing " + path + ", which another user could have written: writable by group (mode 0660)"
	waitProviders("a group-writable file", func(on bool, diag string) bool { return !on && strings.Contains(diag, want) })
	out, err := d.cli("providers", "list")
	if !strings.Contains(out, want) || !strings.Contains(out, "chmod go-w "+path) {
		t.Errorf("providers list: %v\n%s\nwant the diagnostic %q and the fix", err, out, want)
	}

	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	waitProviders("the same file, its mode fixed", func(on bool, diag string) bool { return on && diag == "" })
}

// The daemon's home is 0700 (created so, or narrowed from 0755), and the
// database, its WAL and shared memory are 0600: another user cannot read
// them, even through a home they may enter.
func TestServeKeepsItsDataPrivate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	base := openBase(t)
	var u *otherUser
	if os.Geteuid() == 0 {
		v := newOtherUser(t)
		u = &v
	}
	for _, tt := range []struct {
		name   string
		home   string
		before fs.FileMode // 0: the home does not exist
	}{
		{"new home", filepath.Join(base, "new", "home"), 0},
		{"existing 0755 home", filepath.Join(base, "old"), 0o755},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != 0 {
				mkdirMode(t, tt.home, tt.before)
			}
			d, log := startServeIn(t, bin, "", tt.home, userEnv(os.Getenv("HOME"), "AGENTPOOL_HOME="+tt.home, "XDG_STATE_HOME="+t.TempDir()))
			if _, err := d.client.Sessions(context.Background()); err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(tt.home, databaseFile)
			for path, want := range map[string]fs.FileMode{
				tt.home: 0o700, filepath.Join(tt.home, worktreesDir): 0o700,
				db: 0o600, db + walSuffix: 0o600, db + shmSuffix: 0o600, db + lockSuffix: 0o600,
				filepath.Join(tt.home, tokenFileName): 0o600, filepath.Join(tt.home, providersFile): 0o600,
				filepath.Join(tt.home, daemonFileName): 0o600,
			} {
				fi, err := os.Stat(path)
				if err != nil || fi.Mode().Perm() != want {
					t.Errorf("stat %s = %v, %v; want mode %04o", path, fi.Mode(), err, want)
				}
			}
			if tt.before != 0 && !strings.Contains(log.String(), "narrowed the mode") {
				t.Errorf("the daemon's log does not say it narrowed the home's mode:\n%s", log)
			}
			if u == nil {
				return
			}
			for _, enter := range []fs.FileMode{0o700, 0o711} { // 0711: the files' own modes must hold
				if err := os.Chmod(tt.home, enter); err != nil {
					t.Fatal(err)
				}
				for _, p := range []string{db, db + walSuffix, db + shmSuffix} {
					if out, err := u.read(p); err == nil || !strings.Contains(out, "Permission denied") {
						t.Errorf("home mode %04o: cat %s as %s: %v, %q...; want permission denied", enter, p, u.name, err, out[:min(len(out), 40)])
					}
				}
			}
			if err := os.Chmod(tt.home, 0o700); err != nil {
				t.Fatal(err)
			}
		})
	}
}
