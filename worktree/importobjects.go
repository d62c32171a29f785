package worktree

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The two directories an import works with: the source repository, made
// of the agent's objects alone, and the quarantine the fetch writes into.

// importRef is the ref of the source repository that names the agent's
// commit.
const importRef = "refs/heads/import"

// maxStagedFiles bounds the files an import takes from a view.
const maxStagedFiles = 1 << 20

// quarantinePrefix names the quarantines in a repository's object store.
const quarantinePrefix = "tmp_objdir-agentpool-"

// errTooManyObjects refuses a view holding more than maxStagedFiles.
var errTooManyObjects = fmt.Errorf("the agent's view holds more than %d object files", maxStagedFiles)

// sourceRepo is a bare repository made, for one import, of the loose
// objects and packs an agent's view added, with the real object store as
// its alternate.
type sourceRepo struct {
	dir string
}

// remove deletes the repository (links to the view's files: the files
// stay).
func (s sourceRepo) remove() { _ = removeTree(s.dir) }

// stageView makes the source repository of an import of want from v, in
// v's directory (so that links to the agent's files stay on their
// filesystem), next to the real store of the common directory common.
//
// It takes from the overlay's upper directory the loose objects
// (objects/xx/<rest of the id>) and packs (pack/pack-<id>.pack with its
// .idx) that are regular files with the names git gives them, and
// nothing else: no info/alternates (which would let the agent point the
// import at any store the daemon can read), no commit-graph, no symlink,
// nothing whose name the real store already holds (the agent rewrote it,
// or git copied it up to touch its time: the real one is used). Files are
// opened through os.Root without following a symlink, and linked from the
// open file, so that one swapped meanwhile cannot bring in another file.
func (m *Manager) stageView(v GitView, common, want string) (sourceRepo, error) {
	for _, old := range globNames(v.Dir, ".import-") {
		_ = removeTree(filepath.Join(v.Dir, old)) // left by a daemon that died mid-import
	}
	dir, err := os.MkdirTemp(v.Dir, ".import-")
	if err != nil {
		return sourceRepo{}, fmt.Errorf("import: %w", err)
	}
	s := sourceRepo{dir: dir}
	if err := s.init(filepath.Join(common, "objects"), want); err != nil {
		s.remove()
		return sourceRepo{}, err
	}
	// Each launch mounts a layer of its own (sandbox.GitLayerPrefix); the
	// upper directory itself is read too.
	layers := []string{v.ObjectsUpper}
	for _, l := range globNames(v.ObjectsUpper, launchLayerPrefix) {
		// A directory, never a symlink to one elsewhere.
		if fi, err := os.Lstat(filepath.Join(v.ObjectsUpper, l)); err == nil && fi.IsDir() {
			layers = append(layers, filepath.Join(v.ObjectsUpper, l))
		}
	}
	n := 0
	for _, upper := range layers {
		if err := s.stage(upper, filepath.Join(common, "objects"), len(want), &n); err != nil {
			s.remove()
			return sourceRepo{}, err
		}
	}
	return s, nil
}

// launchLayerPrefix starts the names of the launches' layers in the
// upper directory: sandbox.GitLayerPrefix (the worktree package imports
// no sandbox).
const launchLayerPrefix = "layer-"

// init writes the bare repository's skeleton: HEAD, config (with the
// object format of an id as long as want), the alternates file naming
// real, and importRef at want.
func (s sourceRepo) init(real, want string) error {
	config := "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
	if len(want) == 64 {
		config = "[core]\n\trepositoryformatversion = 1\n\tbare = true\n[extensions]\n\tobjectformat = sha256\n"
	}
	for _, d := range []string{"objects/info", "objects/pack", "refs/heads", "refs/tags"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
			return fmt.Errorf("import: %w", err)
		}
	}
	for name, content := range map[string]string{
		"HEAD":                    "ref: " + importRef + "\n",
		"config":                  config,
		"objects/info/alternates": quoteAlternate(real) + "\n",
		importRef:                 want + "\n",
	} {
		if err := os.WriteFile(filepath.Join(s.dir, filepath.FromSlash(name)), []byte(content), 0o644); err != nil {
			return fmt.Errorf("import: %w", err)
		}
	}
	return nil
}

// stage links the agent's loose objects and packs from upper into the
// repository (see stageView), leaving out the names real holds. What
// cannot be read of upper (the agent's to make unreadable) is left out:
// the fetch then misses it, and refuses the import if it needs it.
func (s sourceRepo) stage(upper, real string, hexLen int, count *int) error {
	root, err := os.OpenRoot(upper)
	if err != nil {
		return nil
	}
	defer root.Close()
	ents, err := readDirIn(root, ".")
	if err != nil {
		return nil
	}
	n := *count
	defer func() { *count = n }()
	for _, e := range ents {
		if !isHex(e, 2) {
			continue
		}
		files, err := readDirIn(root, e)
		if err != nil {
			continue
		}
		for _, f := range files {
			if !isHex(f, hexLen-2) {
				continue
			}
			name := e + "/" + f
			if lexists(filepath.Join(real, filepath.FromSlash(name))) {
				continue
			}
			if n++; n > maxStagedFiles {
				return errTooManyObjects
			}
			if err := s.take(root, name); err != nil {
				return err
			}
		}
	}
	files, _ := readDirIn(root, "pack")
	have := make(map[string]bool, len(files))
	for _, f := range files {
		have[f] = true
	}
	for _, f := range files {
		base, ok := strings.CutSuffix(f, ".pack")
		if !ok || !isPackName(base, hexLen) || !have[base+".idx"] || lexists(filepath.Join(real, "pack", f)) {
			continue
		}
		if n += 2; n > maxStagedFiles {
			return errTooManyObjects
		}
		for _, name := range []string{"pack/" + f, "pack/" + base + ".idx"} {
			if err := s.take(root, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// take links (or, across filesystems, copies) the regular file name of
// root into the repository's objects directory. A file that is not a
// regular one, or that vanished, is left out.
func (s sourceRepo) take(root *os.Root, name string) error {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil // a whiteout, a symlink, a file gone: not an object
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	dst := filepath.Join(s.dir, "objects", filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	// The open file itself, never a path the agent could swap meanwhile.
	if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW); err == nil {
		return nil
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if _, err := io.Copy(out, f); err != nil {
		out.Close()
		return fmt.Errorf("import: copy %s: %w", name, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	return nil
}

// readDirIn lists the directory name of root without following a
// symlink out of it; nothing when name is not a directory.
func readDirIn(root *os.Root, name string) ([]string, error) {
	d, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fi, err := d.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, nil
	}
	return d.Readdirnames(-1)
}

// isHex reports whether s is n lower-case hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isPackName reports whether base is "pack-<id>" for an id of hexLen
// digits.
func isPackName(base string, hexLen int) bool {
	id, ok := strings.CutPrefix(base, "pack-")
	return ok && isHex(id, hexLen)
}

// globNames lists the entries of dir whose names start with prefix.
func globNames(dir, prefix string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// quarantine is a directory of a repository's object store that a fetch
// writes into (see bringIn), and that git reads nothing from until
// migrate moves its objects into the store.
type quarantine struct {
	dir     string
	objects string // the store
}

// staleQuarantine is the age of a quarantine that no import can still be
// using.
const staleQuarantine = 2 * importTimeout

// newQuarantine makes a quarantine in the object store objects, and
// removes those a daemon that died mid-import left.
func newQuarantine(objects string) (quarantine, error) {
	for _, old := range globNames(objects, quarantinePrefix) {
		p := filepath.Join(objects, old)
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() && time.Since(fi.ModTime()) > staleQuarantine {
			_ = removeTree(p)
		}
	}
	dir, err := os.MkdirTemp(objects, quarantinePrefix)
	if err != nil {
		return quarantine{}, fmt.Errorf("import: %w", err)
	}
	return quarantine{dir: dir, objects: objects}, nil
}

// env makes git write new objects into the quarantine and read the
// store's as an alternate.
func (q quarantine) env() []string {
	return []string{"GIT_OBJECT_DIRECTORY=" + q.dir, "GIT_ALTERNATE_OBJECT_DIRECTORIES=" + quoteAlternate(q.objects)}
}

// quoteAlternate writes path as an entry of an alternates list, which
// separates entries with ':' (or lines) and takes one that starts with a
// double quote as C-quoted.
func quoteAlternate(path string) string {
	if !strings.ContainsAny(path, ":\"\\\n") {
		return path
	}
	r := strings.NewReplacer("\\", "\\\\", "\"", "\\\"", "\n", "\\n")
	return "\"" + r.Replace(path) + "\""
}

// remove deletes the quarantine and what is left in it.
func (q quarantine) remove() { _ = removeTree(q.dir) }

// migrate moves the quarantine's loose objects and packs into the store,
// as git's own quarantine does: never over a file the store has (same
// name, same content), each pack's index last, so that no reader finds a
// pack without its data.
func (q quarantine) migrate() error {
	ents, err := os.ReadDir(q.dir)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() || !isHex(e.Name(), 2) {
			continue
		}
		files, err := os.ReadDir(filepath.Join(q.dir, e.Name()))
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		if err := os.MkdirAll(filepath.Join(q.objects, e.Name()), 0o755); err != nil {
			return fmt.Errorf("import: %w", err)
		}
		for _, f := range files {
			if strings.HasPrefix(f.Name(), "tmp_") {
				continue
			}
			if err := moveNew(filepath.Join(q.dir, e.Name(), f.Name()), filepath.Join(q.objects, e.Name(), f.Name())); err != nil {
				return err
			}
		}
	}
	files, err := os.ReadDir(filepath.Join(q.dir, "pack"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	rank := map[string]int{".pack": 0, ".rev": 1, ".idx": 2}
	var names []string
	for _, f := range files {
		if _, ok := rank[filepath.Ext(f.Name())]; ok && strings.HasPrefix(f.Name(), "pack-") {
			names = append(names, f.Name())
		}
	}
	sort.SliceStable(names, func(i, j int) bool { return rank[filepath.Ext(names[i])] < rank[filepath.Ext(names[j])] })
	for _, n := range names {
		if err := moveNew(filepath.Join(q.dir, "pack", n), filepath.Join(q.objects, "pack", n)); err != nil {
			return err
		}
	}
	return nil
}

// moveNew links src to dst unless dst exists, then removes src.
func moveNew(src, dst string) error {
	err := os.Link(src, dst)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		if lexists(dst) {
			return nil
		}
		// A filesystem without hard links.
		if rerr := os.Rename(src, dst); rerr != nil {
			return fmt.Errorf("import: %w", err)
		}
		return nil
	}
	_ = os.Remove(src)
	return nil
}
