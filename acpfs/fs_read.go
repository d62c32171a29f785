package acpfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"unicode/utf8"
	"unsafe"
)

// ReadChunk is the size of the pieces a read works in: the file is checked,
// then lent to ReadTextFileFunc's use, through one buffer of at most
// ReadChunk bytes (plus the end of a split character), never whole. A read
// counts twice its buffer against FSConfig.ReadBudget: the buffer, and as
// much again for what use makes of a piece (a backend's encoded answer,
// written in pieces of at most ReadChunk bytes).
const ReadChunk = 64 << 10

// Content is the text of a read, lent to ReadTextFileFunc's use. It is not
// in memory: Each reads it from the file again, piece by piece.
type Content struct {
	r   io.ReaderAt // nil when empty
	off int64
	n   int64
	buf []byte
	// held is the whole file when it fitted in buf at the check: it is
	// lent from there, without reading the file again.
	held []byte
}

// Len is the length of the content in bytes.
func (c *Content) Len() int64 { return c.n }

// Each calls fn with the content in order, in pieces of at most ReadChunk
// bytes plus the rest of a character split at the end, each ending on a
// character boundary; a piece is valid only until fn returns, and fn must
// not change it. Each stops at fn's first error and returns it, or at the
// file's. The content was checked to be text when the read began; a file
// that changes meanwhile gives what it holds now (at most Len bytes, no
// longer checked), as any read racing a write may; a file that came whole
// in the check's first read is lent from memory, as checked.
func (c *Content) Each(fn func(piece []byte) error) error {
	if c.n == 0 {
		return nil
	}
	if c.held != nil {
		return fn(c.held[c.off : c.off+c.n])
	}
	sr := io.NewSectionReader(c.r, c.off, c.n)
	chunk := len(c.buf) - (utf8.UTFMax - 1)
	carry := 0
	for {
		n, err := io.ReadFull(sr, c.buf[carry:carry+chunk])
		end := carry + n
		if err != nil {
			if end > 0 {
				if ferr := fn(c.buf[:end]); ferr != nil {
					return ferr
				}
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil
			}
			return fmt.Errorf("read content: %w", err)
		}
		cut := runeCut(c.buf[:end])
		if cut > 0 {
			if ferr := fn(c.buf[:cut]); ferr != nil {
				return ferr
			}
		}
		carry = copy(c.buf, c.buf[cut:end])
	}
}

// String returns the whole content as one string (a copy held by the
// caller, outside the read budget).
func (c *Content) String() (string, error) {
	if c.held != nil && c.n > 0 {
		// held was read for this read only and is never written again.
		return unsafe.String(&c.held[c.off], int(c.n)), nil
	}
	var sb strings.Builder
	sb.Grow(int(c.n))
	err := c.Each(func(p []byte) error { sb.Write(p); return nil })
	return sb.String(), err
}

// runeCut returns where an incomplete character at the end of b starts,
// or len(b).
func runeCut(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

// read is ReadTextFile without the audit; rel is "" when the guard refused
// the path before it could be made relative. On success, release closes the
// file and gives back the read's slot and budget, which the caller holds
// while it uses the content.
func (f *FS) read(ctx context.Context, path string, line, limit *int) (c *Content, rel string, release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, "", nil, fmt.Errorf("read %q: %w", path, err)
	}
	select {
	case f.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, "", nil, fmt.Errorf("read %q: %w", path, ctx.Err())
	}
	var weight int64
	var file *os.File
	release = func() {
		if file != nil {
			_ = file.Close()
		}
		f.bytes.release(weight)
		<-f.slots
	}
	c, rel, err = f.readSlot(ctx, path, line, limit, &weight, &file)
	if err != nil {
		release()
		return nil, rel, nil, err
	}
	return c, rel, release, nil
}

// readSlot checks a file within a slot: it opens it (setting *file), takes
// the read's weight from the budget (setting *weight), reads the file
// through once to check it is text and find the lines asked for, and
// returns the content that the caller reads again.
func (f *FS) readSlot(ctx context.Context, path string, line, limit *int, weight *int64, file **os.File) (*Content, string, error) {
	rel, real, err := f.guard.resolve(path)
	if err != nil {
		return nil, rel, notFound(path, err)
	}
	if err := authorize(ctx, Access{Op: OpRead, Path: path, Rel: rel}); err != nil {
		return nil, rel, err
	}
	// O_NONBLOCK: opening a FIFO must not hang; it is refused below.
	fh, err := f.guard.root.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, rel, notFound(path, f.guard.opError(path, err))
	}
	*file = fh
	fi, err := fh.Stat()
	if err != nil {
		return nil, rel, fmt.Errorf("read %q: %w", path, err)
	}
	switch {
	case fi.IsDir():
		return nil, rel, fmt.Errorf("read %q: %w", path, ErrIsDirectory)
	case !fi.Mode().IsRegular():
		return nil, rel, fmt.Errorf("read %q: %w", path, ErrNotRegular)
	case fi.Size() > f.cfg.MaxFileSize:
		return nil, rel, fmt.Errorf("read %q: %d bytes: %w (%d)", path, fi.Size(), ErrTooLarge, f.cfg.MaxFileSize)
	}
	// One buffer, no larger than the file (+1 to see its end in one read),
	// and as much again for the piece's encoding (see ReadChunk).
	buf := make([]byte, min(fi.Size()+1, ReadChunk)+utf8.UTFMax-1)
	w := min(2*int64(len(buf)), f.bytes.size)
	if err := f.bytes.acquire(ctx, w); err != nil {
		return nil, rel, fmt.Errorf("read %q: %w", path, err)
	}
	*weight = w
	start, end, whole, err := scanText(fh, buf, f.cfg.MaxFileSize, line, limit)
	if err != nil {
		return nil, rel, fmt.Errorf("read %q: %w", path, err)
	}
	c := &Content{r: fh, off: start, n: end - start, buf: buf}
	if whole {
		c.held = buf
	}
	return c, rel, nil
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

// scanText reads r to its end through buf (at most max bytes, else
// ErrTooLarge), checks that it is text (no NUL byte, valid UTF-8, else
// ErrNotText), and returns the offsets of limit lines from the 1-based
// line, line endings kept. A nil or non-positive line starts at the first
// line, and a line past the end gives empty content; a nil or non-positive
// limit runs to the end. whole reports that buf still holds the whole file
// from its start (it came in one read).
func scanText(r io.Reader, buf []byte, max int64, line, limit *int) (start, end int64, whole bool, err error) {
	skip, take := 0, 0
	if line != nil && *line > 1 {
		skip = *line - 1
	}
	if limit != nil && *limit > 0 {
		take = *limit
	}
	started, ended := skip == 0, false
	lr := io.LimitReader(r, max+1)
	chunk := len(buf) - (utf8.UTFMax - 1)
	var pos int64 // bytes read so far
	lines := 0    // newlines seen so far
	carry := 0    // bytes of a split character kept at the front of buf
	reads := 0    // reads that returned bytes
	for {
		n, rerr := lr.Read(buf[carry : carry+chunk])
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return 0, 0, false, rerr
		}
		eof := rerr != nil
		if n > 0 {
			reads++
		}
		fresh, off := buf[carry:carry+n], pos
		pos += int64(n)
		if pos > max {
			return 0, 0, false, fmt.Errorf("%w (%d)", ErrTooLarge, max)
		}
		if i := bytes.IndexByte(fresh, 0); i >= 0 {
			return 0, 0, false, fmt.Errorf("NUL byte at offset %d: %w", off+int64(i), ErrNotText)
		}
		for s := fresh; !started || (take > 0 && !ended); {
			i := bytes.IndexByte(s, '\n')
			if i < 0 {
				break
			}
			lines++
			off += int64(i) + 1
			s = s[i+1:]
			switch {
			case !started && lines == skip:
				started, start = true, off
			case started && take > 0 && lines == skip+take:
				ended, end = true, off
			}
		}
		text := buf[:carry+n]
		cut := len(text)
		if !eof {
			cut = runeCut(text)
		}
		if !utf8.Valid(text[:cut]) {
			return 0, 0, false, fmt.Errorf("invalid UTF-8: %w", ErrNotText)
		}
		carry = copy(buf, text[cut:])
		if eof {
			break
		}
	}
	whole = reads <= 1
	switch {
	case !started:
		return 0, 0, whole, nil
	case !ended:
		end = pos
	}
	return start, end, whole, nil
}
