package acpfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxSymlinkHops bounds symlink resolution, as the kernel does (MAXSYMLINKS).
const maxSymlinkHops = 40

// gitDirName is the name refused for writes in any path component.
const gitDirName = ".git"

// Guard confines agent paths to one worktree root. It is safe for
// concurrent use.
//
// Resolve accepts an absolute path whose cleaned form is the root or lies
// under it (separator-bounded) and whose symlinks, resolved one component at
// a time relative to the root, never leave it. The check alone is not the
// confinement: FS performs every operation through the Guard's os.Root, which
// refuses at use time a symlink that was swapped in after the check.
type Guard struct {
	root  *os.Root
	dir   *os.File // the same directory, for the openat2 fast path
	real  string   // absolute, symlink-resolved root
	roots []string // real, then the given absolute root if it differs
}

// NewGuard opens a Guard on root, which must be an existing directory. The
// root is made absolute and symlink-resolved; paths under the root as given
// are accepted too.
func NewGuard(root string) (*Guard, error) {
	if root == "" {
		return nil, fmt.Errorf("guard: empty root")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("guard root %q: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("guard root %q: %w", root, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("guard root %q: %w", root, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("guard root %q: not a directory", root)
	}
	dir, err := os.Open(real)
	if err != nil {
		return nil, fmt.Errorf("guard root %q: %w", root, err)
	}
	r, err := os.OpenRoot(real)
	if err != nil {
		dir.Close()
		return nil, fmt.Errorf("guard root %q: %w", root, err)
	}
	if err := sameDir(dir, r); err != nil {
		dir.Close()
		r.Close()
		return nil, fmt.Errorf("guard root %q: %w", root, err)
	}
	g := &Guard{root: r, dir: dir, real: real, roots: []string{real}}
	if abs != real {
		g.roots = append(g.roots, abs)
	}
	return g, nil
}

// Root returns the absolute, symlink-resolved worktree root.
func (g *Guard) Root() string { return g.real }

// Close closes the Guard's os.Root. Operations through the Guard fail after.
func (g *Guard) Close() error {
	return errors.Join(g.root.Close(), g.dir.Close())
}

// sameDir checks that dir and r were opened on the same directory (nothing
// was swapped in between the two opens).
func sameDir(dir *os.File, r *os.Root) error {
	a, err := dir.Stat()
	if err != nil {
		return err
	}
	b, err := r.Stat(".")
	if err != nil {
		return err
	}
	if !a.IsDir() || !os.SameFile(a, b) {
		return errors.New("root changed while it was opened")
	}
	return nil
}

// Resolve turns an agent path into the cleaned path relative to the root
// ("." for the root itself), after checking that it and every symlink on the
// way lead inside the root. A missing final part is accepted (a write may
// create it). Errors wrap ErrNulByte, ErrRelativePath, ErrOutsideRoot or
// ErrSymlinkLoop, or the file system error met while resolving.
func (g *Guard) Resolve(p string) (rel string, err error) {
	rel, _, err = g.resolve(p)
	return rel, err
}

// ResolveWrite is Resolve for a write: it also refuses, with ErrGitDir, a
// path that names .git or a symlink that resolves into .git, at any depth.
func (g *Guard) ResolveWrite(p string) (rel string, err error) {
	rel, _, err = g.resolveWrite(p)
	return rel, err
}

// resolveWrite is ResolveWrite returning the symlink-resolved path as well.
func (g *Guard) resolveWrite(p string) (rel, real string, err error) {
	rel, real, err = g.resolve(p)
	if err != nil {
		return rel, real, err
	}
	if hasGitComponent(rel) || hasGitComponent(real) {
		return rel, real, fmt.Errorf("write %q: %w", p, ErrGitDir)
	}
	return rel, real, nil
}

// resolve returns the lexical path relative to the root and the physical one
// (every symlink resolved), which is what file operations use: os.Root
// refuses absolute symlinks even when they point inside the root.
func (g *Guard) resolve(p string) (rel, real string, err error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", "", fmt.Errorf("path %q: %w", p, ErrNulByte)
	}
	if !filepath.IsAbs(p) {
		return "", "", fmt.Errorf("path %q: %w", p, ErrRelativePath)
	}
	rel, ok := g.relative(filepath.Clean(p))
	if !ok {
		return "", "", fmt.Errorf("path %q: %w %q", p, ErrOutsideRoot, g.real)
	}
	real, err = g.walk(p, rel)
	if err != nil {
		return rel, "", err
	}
	return rel, real, nil
}

// relative returns clean (absolute and cleaned) relative to the first root
// that contains it, separator-bounded.
func (g *Guard) relative(clean string) (string, bool) {
	for _, root := range g.roots {
		if clean == root {
			return ".", true
		}
		prefix := root
		if !strings.HasSuffix(prefix, string(filepath.Separator)) {
			prefix += string(filepath.Separator)
		}
		if strings.HasPrefix(clean, prefix) {
			return clean[len(prefix):], true
		}
	}
	return "", false
}

// walk resolves rel component by component through the os.Root, following
// symlinks physically (".." after a link leaves the link's target, not the
// link), and returns the resolved path relative to the root. Components after
// the first missing one are taken as they are.
func (g *Guard) walk(p, rel string) (string, error) {
	if rel == "." || plainPath(g.dir, rel) {
		return rel, nil
	}
	queue := strings.Split(rel, string(filepath.Separator))
	var real []string
	hops := 0
	missingAt := -1 // index in real of the first component that does not exist
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(real) == 0 {
				return "", fmt.Errorf("path %q: %w %q", p, ErrOutsideRoot, g.real)
			}
			real = real[:len(real)-1]
			if missingAt >= len(real) {
				missingAt = -1 // back on existing ground: resolve again
			}
			continue
		}
		if missingAt >= 0 {
			real = append(real, c)
			continue
		}
		cand := filepath.Join(append(real, c)...)
		fi, err := g.root.Lstat(cand)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			missingAt = len(real)
			real = append(real, c)
			continue
		case err != nil:
			return "", g.opError(p, err)
		case fi.Mode()&fs.ModeSymlink == 0:
			real = append(real, c)
			continue
		}
		if hops++; hops > maxSymlinkHops {
			return "", fmt.Errorf("path %q: %w", p, ErrSymlinkLoop)
		}
		target, err := g.root.Readlink(cand)
		if err != nil {
			return "", g.opError(p, err)
		}
		if filepath.IsAbs(target) {
			trel, ok := g.relative(filepath.Clean(target))
			if !ok {
				return "", fmt.Errorf("path %q: symlink %q to %q: %w", p, cand, target, ErrOutsideRoot)
			}
			real = real[:0]
			target = trel
		}
		queue = append(strings.Split(target, string(filepath.Separator)), queue...)
	}
	if len(real) == 0 {
		return ".", nil
	}
	return filepath.Join(real...), nil
}

// opError wraps an error of an os.Root operation on the agent path p,
// turning os.Root's refusals into this package's sentinels, and ENOTDIR (a
// file used as a directory) into ErrNotDirectory.
func (g *Guard) opError(p string, err error) error {
	if isEscape(err) {
		return fmt.Errorf("path %q: %w %q", p, ErrOutsideRoot, g.real)
	}
	if isLoop(err) {
		return fmt.Errorf("path %q: %w", p, ErrSymlinkLoop)
	}
	if errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("path %q: %w", p, ErrNotDirectory)
	}
	return fmt.Errorf("path %q: %w", p, err)
}

// isEscape reports whether err is os.Root's refusal of a path that leaves the
// root. os.Root does not export that error, so its text is matched.
func isEscape(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "path escapes from parent"
}

// isLoop reports whether err is the kernel's or os.Root's ELOOP.
func isLoop(err error) bool { return errors.Is(err, syscall.ELOOP) }

// hasGitComponent reports whether any component of rel is ".git".
func hasGitComponent(rel string) bool {
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		if c == gitDirName {
			return true
		}
	}
	return false
}
