package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// otherUID is a user that is not the test's; root can give it files
// without it existing in the user database.
const otherUID = 65534

// requireRoot skips a test that needs chown.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
}

// mkdirMode creates dir with exactly mode (umask aside).
func mkdirMode(t *testing.T, dir string, mode fs.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeMode creates file with content "x" and exactly mode.
func writeMode(t *testing.T, path string, mode fs.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckTrusted(t *testing.T) {
	root := t.TempDir()
	own := writeMode(t, filepath.Join(root, "own"), 0o644)
	groupW := writeMode(t, filepath.Join(root, "group-writable"), 0o664)
	otherW := writeMode(t, filepath.Join(root, "other-writable"), 0o646)
	ownDir := mkdirMode(t, filepath.Join(root, "dir"), 0o755)
	sticky := mkdirMode(t, filepath.Join(root, "sticky"), 0o777|fs.ModeSticky)
	inSticky := writeMode(t, filepath.Join(sticky, "f"), 0o600)
	open := mkdirMode(t, filepath.Join(root, "open"), 0o777)
	inOpen := writeMode(t, filepath.Join(open, "f"), 0o600)
	groupDir := mkdirMode(t, filepath.Join(root, "groupdir"), 0o775)
	inGroupDir := writeMode(t, filepath.Join(groupDir, "f"), 0o600)
	link := filepath.Join(root, "link")
	if err := os.Symlink("dir/../own", link); err != nil {
		t.Fatal(err)
	}
	linkIntoOpen := filepath.Join(ownDir, "to-open")
	if err := os.Symlink(inOpen, linkIntoOpen); err != nil {
		t.Fatal(err)
	}
	loop := filepath.Join(root, "loop")
	if err := os.Symlink("loop", loop); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		path      string
		wantReal  string
		wantEntry string // "" = trusted
		wantWhy   string
		wantLoose bool
	}{
		{"own file", own, own, "", "", false},
		{"own directory", ownDir, ownDir, "", "", false},
		{"group-writable file", groupW, "", groupW, "writable by group (mode 0664)", true},
		{"other-writable file", otherW, "", otherW, "writable by others (mode 0646)", true},
		{"in a sticky world-writable directory", inSticky, inSticky, "", "", false},
		{"a sticky world-writable directory itself", sticky, "", sticky, "writable by group and others (mode 0777)", true},
		{"in a world-writable directory", inOpen, "", open, "writable by group and others and not sticky (mode 0777)", false},
		{"in a group-writable directory", inGroupDir, "", groupDir, "writable by group and not sticky (mode 0775)", false},
		{"missing in a world-writable directory", filepath.Join(open, "missing"), "", open, "not sticky", false},
		{"symlink to an own file", link, own, "", "", false},
		{"symlink into a world-writable directory", linkIntoOpen, "", open, "not sticky", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			real, err := checkTrusted(tt.path)
			if tt.wantEntry == "" {
				if err != nil || real != tt.wantReal {
					t.Errorf("checkTrusted(%q) = %q, %v; want %q, nil", tt.path, real, err, tt.wantReal)
				}
				return
			}
			ue, ok := isUntrusted(err)
			if !ok || ue.Entry != tt.wantEntry || !strings.Contains(ue.Why, tt.wantWhy) || ue.Loose != tt.wantLoose {
				t.Fatalf("checkTrusted(%q) error = %#v; want an untrustedError about %s, %q, loose %v", tt.path, err, tt.wantEntry, tt.wantWhy, tt.wantLoose)
			}
			if !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), "chmod go-w "+tt.wantEntry) {
				t.Errorf("checkTrusted(%q) error = %q; want the path and the fix (chmod go-w %s) in it", tt.path, err, tt.wantEntry)
			}
		})
	}
	if _, err := checkTrusted(filepath.Join(ownDir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("checkTrusted(a missing file) error = %v; want fs.ErrNotExist", err)
	}
	if _, err := checkTrusted(loop); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("checkTrusted(a symlink loop) error = %v; want ELOOP", err)
	}
}

func TestCheckTrustedOwner(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	theirs := writeMode(t, filepath.Join(root, "theirs"), 0o600)
	theirDir := mkdirMode(t, filepath.Join(root, "their-dir"), 0o755)
	inTheirDir := writeMode(t, filepath.Join(theirDir, "f"), 0o600)
	ownLinkToTheirs := filepath.Join(root, "link-to-theirs")
	if err := os.Symlink(theirDir, ownLinkToTheirs); err != nil {
		t.Fatal(err)
	}
	theirLink := filepath.Join(root, "their-link")
	if err := os.Symlink(mkdirMode(t, filepath.Join(root, "own-dir"), 0o700), theirLink); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{theirs, theirDir} {
		if err := os.Chown(p, otherUID, otherUID); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(theirLink, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, path, wantEntry, wantWhy string
	}{
		{"a file of another user", theirs, theirs, "owned by uid 65534"},
		{"a directory of another user", theirDir, theirDir, "owned by uid 65534"},
		{"in a directory of another user", inTheirDir, theirDir, "owned by uid 65534"},
		{"an own symlink to a directory of another user", ownLinkToTheirs, theirDir, "owned by uid 65534"},
		{"a symlink of another user to an own directory", theirLink, theirLink, "a symlink owned by uid 65534"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := checkTrusted(tt.path)
			ue, ok := isUntrusted(err)
			if !ok || ue.Entry != tt.wantEntry || !strings.Contains(ue.Why, tt.wantWhy) || ue.Loose {
				t.Fatalf("checkTrusted(%q) error = %v; want an untrustedError about %s, %q", tt.path, err, tt.wantEntry, tt.wantWhy)
			}
			if !strings.Contains(ue.Why, "not by you (uid 0)") && !strings.Contains(ue.Why, "neither you (uid 0) nor root") {
				t.Errorf("checkTrusted(%q) reason = %q; want it to say who the caller is", tt.path, ue.Why)
			}
		})
	}
	// Root-owned directories on the way are fine for anyone: the rule is
	// about the user running, checked here as if uid 65534 ran.
	tc := trustChecker{euid: otherUID}
	if _, err := tc.check(inTheirDir); err == nil {
		t.Errorf("check(%q) as uid %d = nil; want the root-owned 0700 file refused", inTheirDir, otherUID)
	}
	if err := os.Chown(inTheirDir, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.check(inTheirDir); err != nil {
		t.Errorf("check(%q) as uid %d = %v; want its own file in its own directory under root's trusted", inTheirDir, otherUID, err)
	}
}

// A nearest .agentpool that another user controls is skipped with a
// warning that says why; one of the user's own whose mode is only too
// wide is kept (serve narrows it, the client says how).
func TestFindHomeSkipsAnUntrustedNearest(t *testing.T) {
	root := t.TempDir()
	user := mkdirMode(t, filepath.Join(root, "me"), 0o700)
	open := mkdirMode(t, filepath.Join(root, "open"), 0o777) // not sticky: anyone may swap its entries
	mkdirMode(t, filepath.Join(open, defaultHomeDir), 0o700)
	inOpen := mkdirMode(t, filepath.Join(open, "project"), 0o755)
	wide := mkdirMode(t, filepath.Join(root, "wide"), 0o755)
	mkdirMode(t, filepath.Join(wide, defaultHomeDir), 0o777)
	getenv := func(k string) string { return map[string]string{"HOME": user}[k] }

	var warn strings.Builder
	home, from := findHome(getenv, inOpen, &warn)
	if want := filepath.Join(user, ".local", "state", userStateDir); home != want || from != homeFromUserIgnored {
		t.Errorf("findHome(under %s) = %s, %q; want %s, %q", open, home, from, want, homeFromUserIgnored)
	}
	wantWarn := "agentpool: warning: ignoring " + filepath.Join(open, defaultHomeDir) + ": " + open +
		" is writable by group and others and not sticky (mode 0777)"
	if !strings.Contains(warn.String(), wantWarn) {
		t.Errorf("findHome warned %q; want %q", warn.String(), wantWarn)
	}

	warn.Reset()
	home, from = findHome(getenv, wide, &warn)
	if want := filepath.Join(wide, defaultHomeDir); home != want || from != homeFromNearest || warn.Len() > 0 {
		t.Errorf("findHome(%s) = %s, %q, warning %q; want %s, %q, none", wide, home, from, warn.String(), want, homeFromNearest)
	}
}

// The client refuses a data directory or a daemon.json that others may
// write, and sends nothing to the address it holds.
func TestClientRefusesAWritableDaemonFile(t *testing.T) {
	trap := newTokenTrap(t)
	for _, tt := range []struct {
		name               string
		homeMode, fileMode fs.FileMode
		want               string
	}{
		{"group-writable home", 0o770, 0o600, "refusing the data directory %[1]s: writable by group (mode 0770): make it yours alone: chmod go-w %[1]s"},
		{"world-writable daemon.json", 0o700, 0o666, "refusing %[1]s/daemon.json, which another user could have written: writable by group and others (mode 0666)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home := mkdirMode(t, filepath.Join(t.TempDir(), "home"), tt.homeMode)
			writeMode(t, filepath.Join(home, daemonFileName), tt.fileMode)
			if err := os.WriteFile(filepath.Join(home, daemonFileName), []byte(trap.daemonJSON()), 0o600); err != nil {
				t.Fatal(err)
			}
			env := ClientEnv{Home: home, Token: "my-secret"}
			_, _, err := (&cli{env: env}).runQuiet(t, "ps")
			if want := fmt.Sprintf(tt.want, home); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ps error = %v; want %q", err, want)
			}
			if got := trap.requests(); len(got) > 0 {
				t.Errorf("the address in daemon.json got requests with Authorization %q", got)
			}
		})
	}
}

// BenchmarkCheckTrusted measures the check the client makes of each file
// it reads, and the registry of providers.json on every reload.
func BenchmarkCheckTrusted(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "a", "b")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, daemonFileName)
	if err := os.WriteFile(path, []byte("{}"), 0o600); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := checkTrusted(path); err != nil {
			b.Fatal(err)
		}
	}
}
