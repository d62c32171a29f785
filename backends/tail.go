package backends

import (
	"strings"
	"sync"
)

// Tail keeps the last lines written to it, each capped in length. It is safe
// for concurrent use.
type Tail struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
	max   int
}

// NewTail returns a Tail of n lines of at most maxLen bytes each.
func NewTail(n, maxLen int) *Tail {
	if n <= 0 {
		n = 1
	}
	return &Tail{lines: make([]string, n), max: maxLen}
}

// Add appends a line, dropping the oldest when full.
func (t *Tail) Add(line string) {
	if t.max > 0 && len(line) > t.max {
		line = line[:t.max] + "…"
	}
	t.mu.Lock()
	t.lines[t.next] = line
	t.next = (t.next + 1) % len(t.lines)
	if t.next == 0 {
		t.full = true
	}
	t.mu.Unlock()
}

// Lines returns the kept lines, oldest first.
func (t *Tail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return append([]string(nil), t.lines[:t.next]...)
	}
	out := make([]string, 0, len(t.lines))
	out = append(out, t.lines[t.next:]...)
	return append(out, t.lines[:t.next]...)
}

// String returns the kept lines joined by newlines.
func (t *Tail) String() string { return strings.Join(t.Lines(), "\n") }
