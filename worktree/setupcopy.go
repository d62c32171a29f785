package worktree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// maxCopyFiles bounds how many files one setup copies.
const maxCopyFiles = 10000

// SkippedCopy is a path a setup's copy list named but that was not copied.
type SkippedCopy struct {
	// Path is relative to the top of the repository ("/"-separated), or
	// the pattern that matched nothing.
	Path string `json:"path"`
	// Reason says why, e.g. "tracked: the worktree has its committed
	// version" or "symlink leaves the repository".
	Reason string `json:"reason"`
}

// copyEntry is one path to copy.
type copyEntry struct {
	rel  string // "/"-separated, relative to the top
	mode fs.FileMode
}

// copyFiles copies what patterns name from the main checkout top into the
// worktree dst. Both trees are opened as os.Root, so neither a symlinked
// directory of the checkout nor anything planted in the worktree makes a
// read or a write leave them. Tracked files are skipped (the worktree has
// their committed version), and so are symlinks whose target leaves the
// repository (an absolute one inside it becomes relative), .git and
// anything that is not a file, directory or symlink. Permission bits are
// kept. The paths to copy are recorded first (see recordCopied): no
// snapshot, commit or merge ever holds them. Errors of single paths are
// joined; the others are copied.
func (m *Manager) copyFiles(ctx context.Context, top, dst string, patterns []string) ([]string, []SkippedCopy, error) {
	src, err := os.OpenRoot(top)
	if err != nil {
		return nil, nil, fmt.Errorf("open the main checkout: %w", err)
	}
	defer src.Close()
	out, err := os.OpenRoot(dst)
	if err != nil {
		return nil, nil, fmt.Errorf("open the worktree: %w", err)
	}
	defer out.Close()

	var skipped []SkippedCopy
	seen := map[string]bool{}
	var entries []copyEntry
	var errs []error
	add := func(rel string, mode fs.FileMode) error {
		if seen[rel] {
			return nil
		}
		if len(entries) >= maxCopyFiles {
			return fmt.Errorf("more than %d files to copy: list fewer in %s", maxCopyFiles, SetupFileName)
		}
		seen[rel] = true
		entries = append(entries, copyEntry{rel: rel, mode: mode})
		return nil
	}
	fsys := src.FS()
	for _, pat := range patterns {
		matches, err := fs.Glob(fsys, pat)
		if err != nil {
			errs = append(errs, fmt.Errorf("copy %q: %w", pat, err))
			continue
		}
		if len(matches) == 0 {
			// fs.Glob stats a plain name through its symlink: say why.
			reason := "matches nothing in the main checkout"
			if fi, err := src.Lstat(pat); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				reason = "symlink leaves the repository"
			}
			skipped = append(skipped, SkippedCopy{Path: pat, Reason: reason})
			continue
		}
		for _, rel := range matches {
			if hasGitComponent(rel) {
				continue
			}
			if fi, err := src.Lstat(filepath.FromSlash(rel)); err == nil && !fi.IsDir() {
				// Not walked: a symlink is copied as a link, never followed.
				if err := add(rel, fi.Mode().Type()); err != nil {
					return nil, skipped, err
				}
				continue
			}
			err := fs.WalkDir(fsys, rel, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					errs = append(errs, fmt.Errorf("copy %s: %w", p, err))
					return nil
				}
				if d.Name() == ".git" {
					if d.IsDir() {
						return fs.SkipDir
					}
					return nil
				}
				return add(p, d.Type())
			})
			if err != nil {
				return nil, skipped, err
			}
		}
	}
	if len(entries) == 0 {
		return nil, skipped, errors.Join(errs...)
	}
	tracked, err := m.trackedOf(ctx, top, entries)
	if err != nil {
		return nil, skipped, fmt.Errorf("find tracked files: %w", err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].rel < entries[j].rel })
	// Recorded before anything is copied, so that no snapshot ever holds
	// a copy (see copied.go).
	var planned []string
	for _, e := range entries {
		if !tracked[e.rel] && !e.mode.IsDir() {
			planned = append(planned, e.rel)
		}
	}
	if err := m.recordCopied(dst, planned); err != nil {
		return nil, skipped, err
	}
	var copied []string
	for _, e := range entries {
		if ctx.Err() != nil {
			errs = append(errs, context.Cause(ctx))
			break
		}
		if tracked[e.rel] {
			skipped = append(skipped, SkippedCopy{Path: e.rel, Reason: "tracked: the worktree has its committed version"})
			continue
		}
		reason, err := copyOne(src, out, top, e)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("copy %s: %w", e.rel, err))
		case reason != "":
			skipped = append(skipped, SkippedCopy{Path: e.rel, Reason: reason})
		case e.mode.IsDir():
		default:
			copied = append(copied, e.rel)
		}
	}
	return copied, skipped, errors.Join(errs...)
}

// trackedOf returns the entries that the index of the repository at top
// tracks, looked up as ":<path>" with one cat-file. A name with a line
// break cannot be looked up and counts as tracked (it is not copied).
func (m *Manager) trackedOf(ctx context.Context, top string, entries []copyEntry) (map[string]bool, error) {
	tracked := map[string]bool{}
	var names, rels []string
	for _, e := range entries {
		switch {
		case e.mode.IsDir():
		case strings.ContainsAny(e.rel, "\n\r"):
			tracked[e.rel] = true
		default:
			names, rels = append(names, ":"+e.rel), append(rels, e.rel)
		}
	}
	if len(names) == 0 {
		return tracked, nil
	}
	ids, err := m.resolve(ctx, at(top), names...)
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if id != "" {
			tracked[rels[i]] = true
		}
	}
	return tracked, nil
}

// copyOne copies one entry from src to out. It returns a reason when the
// entry is skipped.
func copyOne(src, out *os.Root, top string, e copyEntry) (string, error) {
	name := filepath.FromSlash(e.rel)
	fi, err := src.Lstat(name)
	if err != nil {
		return "", err
	}
	switch mode := fi.Mode(); {
	case mode.IsDir():
		return "", out.MkdirAll(name, mode.Perm()|0o700)
	case mode&fs.ModeSymlink != 0:
		target, err := src.Readlink(name)
		if err != nil {
			return "", err
		}
		link, ok := linkInside(top, e.rel, target)
		if !ok {
			return "symlink leaves the repository", nil
		}
		if err := prepareDest(out, name); err != nil {
			return "", err
		}
		return "", out.Symlink(link, name)
	case mode.IsRegular():
		if err := prepareDest(out, name); err != nil {
			return "", err
		}
		return "", copyFile(src, out, name, mode.Perm())
	default:
		return "not a regular file, directory or symlink", nil
	}
}

// prepareDest makes the parent directories of name and removes what is at
// name (a file or an empty directory).
func prepareDest(out *os.Root, name string) error {
	if dir := filepath.Dir(name); dir != "." {
		if err := out.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := out.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// copyFile copies the regular file name from src to a new file in out
// with permission bits perm.
func copyFile(src, out *os.Root, name string, perm fs.FileMode) error {
	in, err := src.Open(name)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := out.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, in); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// linkInside returns the target to give a copy of the symlink at rel
// (relative to top) whose target is target, and whether it stays inside
// the repository (and out of .git). An absolute target inside top
// becomes relative, so the copy points into the worktree.
func linkInside(top, rel, target string) (string, bool) {
	if target == "" {
		return "", false
	}
	dir := path.Dir(rel)
	var resolved string // relative to top, "/"-separated
	if filepath.IsAbs(target) {
		r, err := filepath.Rel(top, filepath.Clean(target))
		if err != nil || !within(top, filepath.Clean(target)) {
			return "", false
		}
		resolved = filepath.ToSlash(r)
		t, err := filepath.Rel(filepath.FromSlash(dir), r)
		if err != nil {
			return "", false
		}
		target = filepath.ToSlash(t)
	} else {
		resolved = path.Join(dir, filepath.ToSlash(target))
	}
	if resolved == ".." || strings.HasPrefix(resolved, "../") || hasGitComponent(resolved) {
		return "", false
	}
	return filepath.FromSlash(target), true
}

// hasGitComponent reports whether the "/"-separated path rel has a .git
// component.
func hasGitComponent(rel string) bool {
	for _, c := range strings.Split(rel, "/") {
		if strings.EqualFold(c, ".git") {
			return true
		}
	}
	return false
}
