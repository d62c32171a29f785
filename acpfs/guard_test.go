package acpfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGuardResolve(t *testing.T) {
	tr := makeTree(t)
	g, err := NewGuard(tr.root)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	r := tr.root
	tests := []struct {
		name     string
		path     string
		wantRel  string
		wantErr  error // of Resolve
		wantWErr error // of ResolveWrite, when it differs from wantErr
	}{
		{"root", r, ".", nil, nil},
		{"root trailing separator", r + "/", ".", nil, nil},
		{"root trailing separators", r + "///", ".", nil, nil},
		{"file", r + "/a.txt", "a.txt", nil, nil},
		{"file trailing separator", r + "/a.txt/", "a.txt", nil, nil},
		{"double separators", r + "//dir//b.txt", "dir/b.txt", nil, nil},
		{"dot segments", r + "/./dir/./b.txt", "dir/b.txt", nil, nil},
		{"dotdot inside", r + "/dir/../a.txt", "a.txt", nil, nil},
		{"missing file", r + "/new.txt", "new.txt", nil, nil},
		{"missing dirs", r + "/x/y/z.txt", "x/y/z.txt", nil, nil},
		{"dotdot out", r + "/../outside/canary.txt", "", ErrOutsideRoot, nil},
		{"dotdot deep out", r + "/dir/../../outside", "", ErrOutsideRoot, nil},
		{"sibling prefix", r + "-evil/secret.txt", "", ErrOutsideRoot, nil},
		{"sibling prefix itself", r + "-evil", "", ErrOutsideRoot, nil},
		{"parent of root", tr.base, "", ErrOutsideRoot, nil},
		{"absolute outside", "/etc/passwd", "", ErrOutsideRoot, nil},
		{"filesystem root", "/", "", ErrOutsideRoot, nil},
		{"relative", "a.txt", "", ErrRelativePath, nil},
		{"relative dotdot", "../outside", "", ErrRelativePath, nil},
		{"empty", "", "", ErrRelativePath, nil},
		{"nul", r + "/a.txt\x00.png", "", ErrNulByte, nil},
		{"nul relative", "\x00", "", ErrNulByte, nil},
		{"symlink in", r + "/link-in", "link-in", nil, nil},
		{"absolute symlink in", r + "/link-abs-in", "link-abs-in", nil, nil},
		{"symlinked dir back to root", r + "/dir/up/a.txt", "dir/up/a.txt", nil, nil},
		{"dangling symlink in", r + "/dangling", "dangling", nil, nil},
		{"symlink out file", r + "/link-out-file", "", ErrOutsideRoot, nil},
		{"relative symlink out", r + "/link-out-rel", "", ErrOutsideRoot, nil},
		{"symlinked dir out", r + "/link-out-dir/canary.txt", "", ErrOutsideRoot, nil},
		{"symlinked dir out new file", r + "/link-out-dir/new.txt", "", ErrOutsideRoot, nil},
		{"symlink to sibling", r + "/link-evil/secret.txt", "", ErrOutsideRoot, nil},
		{"symlinked dir up twice", r + "/dir/upup/outside/canary.txt", "", ErrOutsideRoot, nil},
		{"symlink with missing dotdot", r + "/tricky/canary.txt", "", ErrOutsideRoot, nil},
		{"symlink loop", r + "/loop1", "", ErrSymlinkLoop, nil},
		{"symlink loop parent", r + "/loop1/x", "", ErrSymlinkLoop, nil},
		{"self symlink", r + "/self", "", ErrSymlinkLoop, nil},
		{".git dir", r + "/.git", ".git", nil, ErrGitDir},
		{".git file", r + "/.git/HEAD", ".git/HEAD", nil, ErrGitDir},
		{".git hook", r + "/.git/hooks/pre-commit", ".git/hooks/pre-commit", nil, ErrGitDir},
		{"nested .git", r + "/sub/.git", "sub/.git", nil, ErrGitDir},
		{"symlink into .git", r + "/gitlink/hooks/post-checkout", "gitlink/hooks/post-checkout", nil, ErrGitDir},
		{"dotdot to .git", r + "/dir/../.git/config", ".git/config", nil, ErrGitDir},
		{".gitignore", r + "/.gitignore", ".gitignore", nil, nil},
		{".git prefix dir", r + "/.github/x.yml", ".github/x.yml", nil, nil},
		{"case differs", r + "/.GIT/x", ".GIT/x", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rel, err := g.Resolve(tt.path)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Resolve(%q) error = %v; want %v", tt.path, err, tt.wantErr)
			}
			if err == nil && rel != tt.wantRel {
				t.Errorf("Resolve(%q) = %q; want %q", tt.path, rel, tt.wantRel)
			}
			wantW := tt.wantErr
			if tt.wantWErr != nil {
				wantW = tt.wantWErr
			}
			_, err = g.ResolveWrite(tt.path)
			if !errors.Is(err, wantW) || (wantW == nil && err != nil) {
				t.Errorf("ResolveWrite(%q) error = %v; want %v", tt.path, err, wantW)
			}
		})
	}
}

func TestGuardErrorNamesPath(t *testing.T) {
	tr := makeTree(t)
	g, err := NewGuard(tr.root)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	p := tr.root + "/link-out-dir/canary.txt"
	_, err = g.Resolve(p)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("Resolve(%q) error = %v; want it to name the path", p, err)
	}
}

func TestGuardRootThroughSymlink(t *testing.T) {
	tr := makeTree(t)
	alias := filepath.Join(tr.base, "alias")
	if err := os.Symlink(tr.root, alias); err != nil {
		t.Fatal(err)
	}
	g, err := NewGuard(alias + "/")
	if err != nil {
		t.Fatalf("NewGuard(%q) error = %v", alias, err)
	}
	defer g.Close()
	if g.Root() != tr.root {
		t.Errorf("Root() = %q; want the resolved %q", g.Root(), tr.root)
	}
	for _, p := range []string{alias + "/a.txt", tr.root + "/a.txt"} {
		if rel, err := g.Resolve(p); err != nil || rel != "a.txt" {
			t.Errorf("Resolve(%q) = %q, %v; want \"a.txt\", nil", p, rel, err)
		}
	}
	if _, err := g.Resolve(alias + "-x/a.txt"); !errors.Is(err, ErrOutsideRoot) {
		t.Errorf("Resolve(%q) error = %v; want ErrOutsideRoot", alias+"-x/a.txt", err)
	}
}

func TestNewGuardErrors(t *testing.T) {
	tr := makeTree(t)
	for _, root := range []string{"", filepath.Join(tr.root, "missing"), filepath.Join(tr.root, "a.txt")} {
		if g, err := NewGuard(root); err == nil {
			g.Close()
			t.Errorf("NewGuard(%q) error = nil; want an error", root)
		}
	}
}

func TestGuardRelativeRoot(t *testing.T) {
	tr := makeTree(t)
	t.Chdir(tr.base)
	g, err := NewGuard("wt")
	if err != nil {
		t.Fatalf("NewGuard(%q) error = %v", "wt", err)
	}
	defer g.Close()
	if g.Root() != tr.root {
		t.Errorf("Root() = %q; want %q", g.Root(), tr.root)
	}
}
