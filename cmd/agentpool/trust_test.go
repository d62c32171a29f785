package main

import (
	"errors"
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
