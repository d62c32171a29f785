package pty

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/backends"
)

// Attachment is one viewer's stream of the terminal's raw output.
type Attachment struct {
	b      *Backend
	viewer string
	ch     chan []byte

	mu     sync.Mutex
	err    error
	closed bool // the channel is closed (termMu guards the close itself)
}

// Attach starts streaming the terminal to viewer. The stream begins with a
// redraw of the current screen, followed by every byte the program writes.
// A viewer that falls more than Config.ViewerBuffer chunks behind is dropped
// (its channel closes and Err says ErrSlowViewer); it never slows the
// program. Several viewers may attach, under the same or different names,
// as soon as the program runs: also while Start waits for it (a person may
// have to answer a first-run question before it is ready).
func (b *Backend) Attach(viewer string) (*Attachment, error) {
	if !b.spawned() {
		return nil, backends.ErrNotStarted
	}
	a := &Attachment{b: b, viewer: viewer, ch: make(chan []byte, b.cfg.ViewerBuffer+1)}
	b.termMu.Lock()
	defer b.termMu.Unlock()
	if b.exited {
		return nil, backends.ErrExited
	}
	a.ch <- b.scr.redraw()
	b.viewers[a] = struct{}{}
	return a, nil
}

// Output returns the stream. It is closed when the attachment is closed,
// dropped, or the program exits.
func (a *Attachment) Output() <-chan []byte { return a.ch }

// Viewer returns the name the attachment was made under.
func (a *Attachment) Viewer() string { return a.viewer }

// Err says why the stream ended: ErrSlowViewer, backends.ErrExited, or nil
// (still open, or closed by Close).
func (a *Attachment) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Close ends the stream and gives up the input if this viewer held it. It
// is idempotent.
func (a *Attachment) Close() error {
	a.b.termMu.Lock()
	if _, ok := a.b.viewers[a]; ok {
		a.b.dropViewerLocked(a, nil)
	}
	a.b.termMu.Unlock()
	a.b.ReleaseInput(a.viewer)
	return nil
}

// dropViewerLocked unregisters a and closes its channel; termMu is held.
func (b *Backend) dropViewerLocked(a *Attachment, why error) {
	delete(b.viewers, a)
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		a.err = why
		close(a.ch)
	}
	a.mu.Unlock()
}

// TakeInput makes viewer the one who types into the terminal. It fails with
// ErrInputHeld while another viewer holds it. While a viewer holds the
// input Prompt is refused; a running turn goes on (a person may answer the
// program's question), and Cancel and Stop still work.
func (b *Backend) TakeInput(viewer string) error {
	if viewer == "" {
		return fmt.Errorf("take input: %w", ErrNotWriter)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.cmd == nil:
		return backends.ErrNotStarted
	case b.stopping || b.hasExited():
		return backends.ErrExited
	case b.writer != "" && b.writer != viewer:
		return fmt.Errorf("take input for %q: %w (%q)", viewer, ErrInputHeld, b.writer)
	}
	b.writer = viewer
	b.held.Store(true)
	return nil
}

// ReleaseInput gives up the input if viewer holds it.
func (b *Backend) ReleaseInput(viewer string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.writer == viewer {
		b.writer = ""
		b.held.Store(false)
	}
}

// Input types p into the terminal for viewer, which must hold the input
// (ErrNotWriter otherwise).
func (b *Backend) Input(viewer string, p []byte) error {
	b.mu.Lock()
	spawned, writer := b.cmd != nil, b.writer
	b.mu.Unlock()
	switch {
	case !spawned:
		return backends.ErrNotStarted
	case viewer == "" || writer != viewer:
		return fmt.Errorf("input from %q: %w", viewer, ErrNotWriter)
	}
	return b.writeTerm(p)
}

// Resize sets the terminal size: the program gets SIGWINCH and the
// emulator reflows to the new size.
func (b *Backend) Resize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > MaxCols || rows > MaxRows {
		return fmt.Errorf("resize to %dx%d: %w", cols, rows, ErrBadSize)
	}
	if !b.spawned() {
		return backends.ErrNotStarted
	}
	rc, err := b.master.SyscallConn()
	if err != nil {
		return fmt.Errorf("resize: %w", backends.ErrExited)
	}
	ws := &unix.Winsize{Col: uint16(cols), Row: uint16(rows)}
	// The emulator takes the new size before the program can learn it
	// (SIGWINCH) and redraw: a redraw for the new size processed at the
	// old one would be clipped, and stay so. Output waits on termMu.
	b.termMu.Lock()
	defer b.termMu.Unlock()
	prevCols, prevRows := b.scr.size()
	b.scr.resize(cols, rows)
	var ioErr error
	if err := rc.Control(func(fd uintptr) { ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) }); err != nil {
		b.scr.resize(prevCols, prevRows)
		return fmt.Errorf("resize: %w", backends.ErrExited)
	}
	if ioErr != nil {
		b.scr.resize(prevCols, prevRows)
		return fmt.Errorf("resize to %dx%d: %w", cols, rows, ioErr)
	}
	return nil
}

// Screen returns the rendered screen as text: one line per row, trailing
// blanks trimmed except up to the cursor, trailing empty rows left out.
// Ready patterns are matched against the same rendering (with every row).
func (b *Backend) Screen() string {
	b.termMu.Lock()
	defer b.termMu.Unlock()
	if b.scr == nil {
		return ""
	}
	return b.scr.text()
}

// Snapshot returns the rendered screen with its size and cursor, the
// payload of pty.screen.
func (b *Backend) Snapshot() ScreenData {
	b.termMu.Lock()
	defer b.termMu.Unlock()
	if b.scr == nil {
		return ScreenData{}
	}
	return b.scr.snapshot()
}

// EmitScreen emits a pty.screen event now: to the running turn, or to
// Config.OnEvent outside turns. It must not be called from inside an event
// callback.
func (b *Backend) EmitScreen() {
	snap := b.Snapshot()
	b.emitMu.Lock()
	defer b.emitMu.Unlock()
	b.flushOutputLocked()
	b.emitLocked(b.event(backends.EventPTYScreen, snap))
}

// spawned reports whether the program has been started.
func (b *Backend) spawned() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cmd != nil
}
