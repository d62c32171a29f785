package acpfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"unicode/utf8"
	"unsafe"
)

// read is ReadTextFile without the audit; rel is "" when the guard refused
// the path before it could be made relative. On success, release gives back
// the read's slot and budget, which the caller holds while it uses text.
func (f *FS) read(ctx context.Context, path string, line, limit *int) (text, rel string, release func(), err error) {
	if err := ctx.Err(); err != nil {
		return "", "", nil, fmt.Errorf("read %q: %w", path, err)
	}
	select {
	case f.slots <- struct{}{}:
	case <-ctx.Done():
		return "", "", nil, fmt.Errorf("read %q: %w", path, ctx.Err())
	}
	var weight int64
	release = func() {
		f.bytes.release(weight)
		<-f.slots
	}
	text, rel, err = f.readSlot(ctx, path, line, limit, &weight)
	if err != nil {
		release()
		return "", rel, nil, err
	}
	return text, rel, release, nil
}

// readSlot reads within a slot; it takes the file's weight from the budget
// and sets *weight to it.
func (f *FS) readSlot(ctx context.Context, path string, line, limit *int, weight *int64) (text, rel string, err error) {
	rel, real, err := f.guard.resolve(path)
	if err != nil {
		return "", rel, notFound(path, err)
	}
	if err := authorize(ctx, Access{Op: OpRead, Path: path, Rel: rel}); err != nil {
		return "", rel, err
	}
	// O_NONBLOCK: opening a FIFO must not hang; it is refused below.
	file, err := f.guard.root.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", rel, notFound(path, f.guard.opError(path, err))
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return "", rel, fmt.Errorf("read %q: %w", path, err)
	}
	switch {
	case fi.IsDir():
		return "", rel, fmt.Errorf("read %q: %w", path, ErrIsDirectory)
	case !fi.Mode().IsRegular():
		return "", rel, fmt.Errorf("read %q: %w", path, ErrNotRegular)
	case fi.Size() > f.cfg.MaxFileSize:
		return "", rel, fmt.Errorf("read %q: %d bytes: %w (%d)", path, fi.Size(), ErrTooLarge, f.cfg.MaxFileSize)
	}
	// The content, and the answer that encodes it, count against the budget.
	w := min(2*(fi.Size()+1), f.bytes.size)
	if err := f.bytes.acquire(ctx, w); err != nil {
		return "", rel, fmt.Errorf("read %q: %w", path, err)
	}
	*weight = w
	data, err := readLimited(file, fi.Size(), f.cfg.MaxFileSize)
	if err != nil {
		return "", rel, fmt.Errorf("read %q: %w", path, err)
	}
	if int64(len(data)) > f.cfg.MaxFileSize {
		return "", rel, fmt.Errorf("read %q: %w (%d)", path, ErrTooLarge, f.cfg.MaxFileSize)
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return "", rel, fmt.Errorf("read %q: NUL byte at offset %d: %w", path, i, ErrNotText)
	}
	if !utf8.Valid(data) {
		return "", rel, fmt.Errorf("read %q: invalid UTF-8: %w", path, ErrNotText)
	}
	return selectLines(data, line, limit), rel, nil
}

// notFound turns a missing file, or a missing directory on the way to it,
// into ErrNotFound, and a file on the way to it into ErrNotDirectory.
func notFound(path string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("read %q: %w", path, ErrNotDirectory)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("read %q: %w", path, ErrNotFound)
	}
	return err
}

// readLimited reads r to the end or to one byte past max, whichever comes
// first, with one allocation when the file does not grow past size.
func readLimited(r io.Reader, size, max int64) ([]byte, error) {
	buf := make([]byte, 0, min(size, max)+1)
	lr := io.LimitReader(r, max+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// selectLines returns limit lines of data from the 1-based line, keeping
// line endings. A nil or non-positive line starts at the first line; a nil
// or non-positive limit runs to the end. The result shares data's memory
// (no copy of the file): data must not change afterwards.
func selectLines(data []byte, line, limit *int) string {
	s := data
	if line != nil {
		for skip := *line - 1; skip > 0; skip-- {
			i := bytes.IndexByte(s, '\n')
			if i < 0 {
				return ""
			}
			s = s[i+1:]
		}
	}
	if limit != nil && *limit > 0 {
		end := 0
		for n := *limit; n > 0 && end < len(s); n-- {
			i := bytes.IndexByte(s[end:], '\n')
			if i < 0 {
				end = len(s)
				break
			}
			end += i + 1
		}
		s = s[:end]
	}
	if len(s) == 0 {
		return ""
	}
	// data was read for this call only and is never written again.
	return unsafe.String(&s[0], len(s))
}
