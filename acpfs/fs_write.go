package acpfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Modes of files and directories that WriteTextFile creates.
const (
	newFileMode fs.FileMode = 0o644
	newDirMode  fs.FileMode = 0o755
)

// tempAttempts bounds the search for a free temporary file name.
const tempAttempts = 16

// maxTempBase bounds the part of the file name copied into the temporary
// name, so that it stays under the file system's name limit.
const maxTempBase = 64

// write is WriteTextFile without the audit.
func (f *FS) write(ctx context.Context, path, content string) (rel string, err error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("write %q: %w", path, err)
	}
	rel, real, err := f.guard.resolveWrite(path)
	if err != nil {
		return rel, err
	}
	if int64(len(content)) > f.cfg.MaxFileSize {
		return rel, fmt.Errorf("write %q: %d bytes: %w (%d)", path, len(content), ErrTooLarge, f.cfg.MaxFileSize)
	}
	if real == "." {
		return rel, fmt.Errorf("write %q: %w", path, ErrIsDirectory)
	}
	if err := authorize(ctx, Access{Op: OpWrite, Path: path, Rel: rel, Bytes: int64(len(content))}); err != nil {
		return rel, err
	}
	root := f.guard.root
	mode := newFileMode
	fi, err := root.Stat(real)
	switch {
	case err == nil && fi.IsDir():
		return rel, fmt.Errorf("write %q: %w", path, ErrIsDirectory)
	case err == nil && !fi.Mode().IsRegular():
		return rel, fmt.Errorf("write %q: %w", path, ErrNotRegular)
	case err == nil:
		mode = fi.Mode().Perm()
	case errors.Is(err, syscall.ENOTDIR):
		return rel, fmt.Errorf("write %q: %w", path, ErrNotDirectory)
	case !errors.Is(err, fs.ErrNotExist):
		return rel, fmt.Errorf("write %q: %w", path, f.guard.opError(path, err))
	}
	dir := filepath.Dir(real)
	if dir != "." {
		if err := root.MkdirAll(dir, newDirMode); err != nil {
			if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
				// A file where a directory is needed.
				return rel, fmt.Errorf("write %q: %w", path, ErrNotDirectory)
			}
			return rel, fmt.Errorf("write %q: %w", path, f.guard.opError(path, err))
		}
	}
	if err := replaceFile(root, real, []byte(content), mode); err != nil {
		return rel, fmt.Errorf("write %q: %w", path, f.guard.opError(path, err))
	}
	return rel, nil
}

// replaceFile atomically replaces name in root with data: a temporary file in
// the same directory, written, chmodded, synced, renamed over name, then the
// directory synced.
func replaceFile(root *os.Root, name string, data []byte, mode fs.FileMode) error {
	dir, base := filepath.Split(name)
	tmp, tmpName, err := createTemp(root, dir, base)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			root.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := root.Rename(tmpName, name); err != nil {
		return err
	}
	ok = true
	return syncDir(root, dir)
}

// createTemp creates a new file next to base in dir, readable only by its
// owner until it is chmodded.
func createTemp(root *os.Root, dir, base string) (*os.File, string, error) {
	if len(base) > maxTempBase {
		base = base[:maxTempBase]
	}
	var err error
	for range tempAttempts {
		name := filepath.Join(dir, "."+base+".acpfs-"+strconv.FormatUint(rand.Uint64(), 36)+".tmp")
		var f *os.File
		f, err = root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			return f, name, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, "", err
		}
	}
	return nil, "", err
}

// syncDir makes a rename in dir durable.
func syncDir(root *os.Root, dir string) error {
	if dir == "" {
		dir = "."
	}
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
