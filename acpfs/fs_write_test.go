package acpfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteTextFile(t *testing.T) {
	f, tr, log := newTestFS(t, FSConfig{MaxFileSize: 64})
	ctx := context.Background()
	if err := os.WriteFile(tr.root+"/private.txt", []byte("old content that is long\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tr.root+"/script.sh", []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, content string
		wantFile            string // path relative to root that must hold content
		wantMode            fs.FileMode
	}{
		{"new file", "/new.txt", "hello\n", "new.txt", newFileMode},
		{"new dirs", "/x/y/z.txt", "deep\n", "x/y/z.txt", newFileMode},
		{"empty content", "/empty.txt", "", "empty.txt", newFileMode},
		{"keeps mode 0600 and shrinks", "/private.txt", "new\n", "private.txt", 0o600},
		{"keeps mode 0755", "/script.sh", "#!/bin/sh\necho hi\n", "script.sh", 0o755},
		{"overwrite with empty", "/a.txt", "", "a.txt", 0o644},
		{"through symlink in", "/link-in", "via link\n", "a.txt", 0o644},
		{"through absolute symlink in", "/link-abs-in", "via abs link\n", "a.txt", 0o644},
		{"dangling symlink in creates target", "/dangling", "target\n", "missing.txt", newFileMode},
		{"through symlinked dir in", "/dir/up/dir/c.txt", "c\n", "dir/c.txt", newFileMode},
		{"at size limit", "/limit.txt", strings.Repeat("x", 64), "limit.txt", newFileMode},
		{"utf-8", "/u.txt", "héllo € 🎉\n", "u.txt", newFileMode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := f.WriteTextFile(ctx, tr.root+tt.path, tt.content); err != nil {
				t.Fatalf("WriteTextFile(%q) error = %v", tt.path, err)
			}
			p := filepath.Join(tr.root, tt.wantFile)
			got, err := os.ReadFile(p)
			if err != nil || string(got) != tt.content {
				t.Fatalf("after WriteTextFile(%q): ReadFile(%q) = %q, %v; want %q", tt.path, tt.wantFile, got, err, tt.content)
			}
			fi, err := os.Stat(p)
			if err != nil || fi.Mode().Perm() != tt.wantMode {
				t.Errorf("after WriteTextFile(%q): mode of %q = %v, %v; want %v", tt.path, tt.wantFile, fi.Mode().Perm(), err, tt.wantMode)
			}
			op := log.last(t)
			if op.Type != OpWrite || op.Outcome != OutcomeOK || op.Bytes != int64(len(tt.content)) || op.Path != strings.TrimPrefix(tt.path, "/") {
				t.Errorf("audit of WriteTextFile(%q) = %+v; want an ok write of %d bytes", tt.path, op, len(tt.content))
			}
		})
	}
	// Links stay links: the write replaced their target.
	for _, l := range []string{"link-in", "link-abs-in", "dangling"} {
		if fi, err := os.Lstat(filepath.Join(tr.root, l)); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("Lstat(%q) = %v, %v; want a symlink still", l, fi, err)
		}
	}
	checkNoTempFiles(t, tr.root)
	tr.checkOutside(t)
}

func TestWriteTextFileRefusals(t *testing.T) {
	f, tr, log := newTestFS(t, FSConfig{MaxFileSize: 8})
	ctx := context.Background()
	if err := syscall.Mkfifo(filepath.Join(tr.root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, content string
		wantErr             error
		wantOutcome         string
	}{
		{"too large", tr.root + "/a.txt", "123456789", ErrTooLarge, OutcomeRefused},
		{".git file", tr.root + "/.git/HEAD", "x", ErrGitDir, OutcomeRefused},
		{".git hook", tr.root + "/.git/hooks/pre-commit", "x", ErrGitDir, OutcomeRefused},
		{".git itself", tr.root + "/.git", "x", ErrGitDir, OutcomeRefused},
		{"nested .git file", tr.root + "/sub/.git", "x", ErrGitDir, OutcomeRefused},
		{"symlink into .git", tr.root + "/gitlink/config", "x", ErrGitDir, OutcomeRefused},
		{"directory", tr.root + "/dir", "x", ErrIsDirectory, OutcomeRefused},
		{"root", tr.root, "x", ErrIsDirectory, OutcomeRefused},
		{"root slash", tr.root + "/", "x", ErrIsDirectory, OutcomeRefused},
		{"fifo", tr.root + "/fifo", "x", ErrNotRegular, OutcomeRefused},
		{"outside", tr.root + "/../outside/new.txt", "x", ErrOutsideRoot, OutcomeRefused},
		{"sibling prefix", tr.root + "-evil/secret.txt", "x", ErrOutsideRoot, OutcomeRefused},
		{"symlink out", tr.root + "/link-out-file", "x", ErrOutsideRoot, OutcomeRefused},
		{"relative symlink out", tr.root + "/link-out-rel", "x", ErrOutsideRoot, OutcomeRefused},
		{"symlinked dir out", tr.root + "/link-out-dir/new.txt", "x", ErrOutsideRoot, OutcomeRefused},
		{"symlinked dir out, new subdir", tr.root + "/link-out-dir/d/new.txt", "x", ErrOutsideRoot, OutcomeRefused},
		{"symlink up twice", tr.root + "/dir/upup/outside/canary.txt", "x", ErrOutsideRoot, OutcomeRefused},
		{"relative", "a.txt", "x", ErrRelativePath, OutcomeRefused},
		{"nul", tr.root + "/a\x00", "x", ErrNulByte, OutcomeRefused},
		{"loop", tr.root + "/loop1/x", "x", ErrSymlinkLoop, OutcomeRefused},
		{"under a file", tr.root + "/a.txt/x", "x", ErrNotDirectory, OutcomeRefused},
		{"under a file, deeper", tr.root + "/a.txt/d/x", "x", ErrNotDirectory, OutcomeRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.WriteTextFile(ctx, tt.path, tt.content)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("WriteTextFile(%q) error = %v; want %v", tt.path, err, tt.wantErr)
			}
			if op := log.last(t); op.Type != OpWrite || op.Outcome != tt.wantOutcome || op.Bytes != 0 || op.Error == "" {
				t.Errorf("audit of WriteTextFile(%q) = %+v; want outcome %s with an error", tt.path, op, tt.wantOutcome)
			}
		})
	}
	if got, _ := os.ReadFile(tr.root + "/a.txt"); string(got) != "alpha\n" {
		t.Errorf("a.txt after refused writes = %q; want unchanged", got)
	}
	if got, _ := os.ReadFile(tr.root + "/.git/HEAD"); string(got) != "ref: refs/heads/main\n" {
		t.Errorf(".git/HEAD after refused writes = %q; want unchanged", got)
	}
	if _, err := os.Stat(tr.root + "/.git/hooks"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("refused write created .git/hooks: %v", err)
	}
	checkNoTempFiles(t, tr.root)
	tr.checkOutside(t)
}

// checkNoTempFiles fails t if a temporary file of a write was left behind.
func checkNoTempFiles(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".acpfs-") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}
