package acpfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzGuardResolve checks that every path the guard accepts, taken as given
// and under the root, really resolves inside the root: by the kernel
// (filepath.EvalSymlinks of the root-joined path, or of its deepest existing
// ancestor) and through the bridge (a read never returns outside content).
// Accepted writes never resolve into .git.
func FuzzGuardResolve(f *testing.F) {
	tr := makeTree(f)
	fsys, err := NewFS(FSConfig{Root: tr.root, MaxFileSize: 1 << 10})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { fsys.Close() })
	g := fsys.Guard()
	for _, seed := range []string{
		"a.txt", "", ".", "..", "../outside/canary.txt", "link-out-dir/canary.txt",
		"dir/upup/outside/canary.txt", "tricky/canary.txt", "loop1/x", ".git/HEAD",
		"gitlink/hooks/x", "link-abs-in", "dir/up/dir/up/a.txt", "a.txt\x00",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		for _, path := range []string{p, tr.root + "/" + p, tr.root + p} {
			rel, err := g.Resolve(path)
			if err != nil {
				continue
			}
			if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Fatalf("Resolve(%q) = %q; want a path inside the root", path, rel)
			}
			if where := evalInside(tr.root, rel); where != "" {
				t.Fatalf("Resolve(%q) = %q, which resolves to %q outside the root", path, rel, where)
			}
			got, err := fsys.ReadTextFile(context.Background(), path, nil, nil)
			if err == nil && got == canary {
				t.Fatalf("ReadTextFile(%q) read the canary outside the root", path)
			}
			if _, real, err := g.resolveWrite(path); err == nil && strings.Contains("/"+real+"/", "/.git/") {
				t.Fatalf("ResolveWrite(%q) accepted %q in .git", path, real)
			}
		}
	})
}

// evalInside resolves root/rel with the kernel's view of symlinks and
// returns "" when it lies inside root, else where it leads. For a path that
// does not exist, its deepest existing ancestor is checked.
func evalInside(root, rel string) string {
	p := filepath.Join(root, rel)
	for {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			if real == root || strings.HasPrefix(real, root+"/") {
				return ""
			}
			return real
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, os.ErrInvalid) {
			return "" // ENOTDIR, ELOOP: the kernel would not get anywhere either
		}
		parent := filepath.Dir(p)
		if parent == p || len(parent) < len(root) {
			return ""
		}
		p = parent
	}
}
