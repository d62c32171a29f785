package acpfs

import (
	"sync"
	"unicode/utf8"
)

// tailBuffer keeps the last limit bytes written to it. It holds up to twice
// limit before compacting, so a stream of small writes copies each byte about
// once.
type tailBuffer struct {
	limit int

	mu    sync.Mutex
	buf   []byte
	total int64
}

// Write appends p, dropping what falls out of the window.
func (b *tailBuffer) Write(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(len(p))
	switch {
	case b.limit == 0:
	case len(p) >= b.limit:
		b.buf = append(b.buf[:0], p[len(p)-b.limit:]...)
	default:
		b.buf = append(b.buf, p...)
		if len(b.buf) > 2*b.limit {
			b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.limit:]...)
		}
	}
}

// String returns the retained output, at most limit bytes from the end,
// starting at a UTF-8 character boundary and without a character still
// incomplete at the end, and whether anything was dropped from the
// beginning.
func (b *tailBuffer) String() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tail := b.buf
	if len(tail) > b.limit {
		tail = tail[len(tail)-b.limit:]
	}
	truncated := int64(len(tail)) < b.total
	if truncated {
		// The cut may split a character: skip its continuation bytes
		// (at most UTFMax-1, so that binary output is not emptied).
		for i := 0; i < utf8.UTFMax-1 && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
			tail = tail[1:]
		}
	}
	return string(dropPartialRune(tail)), truncated
}

// dropPartialRune drops an incomplete UTF-8 sequence at the end of b, the
// start of a character whose other bytes have not been written yet.
func dropPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// Total returns how many bytes were written, kept or not.
func (b *tailBuffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}
