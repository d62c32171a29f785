package pty

import (
	"regexp"
	"sync"
	"time"
)

// watchSpec says how a watch decides that the program is ready.
type watchSpec struct {
	// ready matches the rendered screen when the program waits for
	// input; nil means: quiet for the quiet window.
	ready *regexp.Regexp
	// busy, if set, matches while the program works; a busy screen is
	// never ready.
	busy  *regexp.Regexp
	quiet time.Duration
	// needOutput: a match counts only once output arrived after arming,
	// so the prompt still on the screen when a turn starts is not taken
	// for the end of it.
	needOutput bool
	// needBusy (with busy): a ready screen ends the wait at once only
	// after the busy pattern was seen; before that, only once the screen
	// has stayed ready and quiet for the quiet window. Programs that keep
	// their prompt on the screen while they work (claude) end turns right.
	needBusy bool
}

// watch decides when the program is ready for input. With a ready pattern
// the reader checks the rendered screen right after each chunk of output
// has been fed to the emulator, so the decision takes no polling; without
// one, the program is ready once no output arrived for the quiet window.
type watch struct {
	spec  watchSpec
	ready chan struct{}

	mu      sync.Mutex
	seen    bool // output arrived since arming
	sawBusy bool
	fired   bool
	timer   *time.Timer // the quiet window, while it runs
}

// newWatch arms a watch. In quiet mode the window starts now.
func newWatch(spec watchSpec) *watch {
	w := &watch{spec: spec, ready: make(chan struct{})}
	if spec.ready == nil {
		w.timer = time.AfterFunc(spec.quiet, w.fire)
	}
	return w
}

// Ready is closed when the program is ready.
func (w *watch) Ready() <-chan struct{} { return w.ready }

func (w *watch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fireLocked()
}

func (w *watch) fireLocked() {
	if !w.fired {
		w.fired = true
		close(w.ready)
	}
}

// output records a chunk of output; screen renders the screen after it.
// It reports whether the watch fired.
func (w *watch) output(screen func() []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return true
	}
	w.seen = true
	if w.spec.ready == nil {
		w.timer.Reset(w.spec.quiet)
		return false
	}
	return w.evalLocked(screen())
}

// check tests the screen without new output (used when arming). It
// reports whether the watch fired.
func (w *watch) check(text []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return true
	}
	if w.spec.ready == nil || (w.spec.needOutput && !w.seen) {
		return false
	}
	return w.evalLocked(text)
}

func (w *watch) evalLocked(text []byte) bool {
	s := w.spec
	if s.busy != nil && s.busy.Match(text) {
		w.sawBusy = true
		w.stopTimerLocked()
		return false
	}
	if !s.ready.Match(text) {
		w.stopTimerLocked()
		return false
	}
	if s.busy == nil || !s.needBusy || w.sawBusy {
		w.fireLocked()
		return true
	}
	// Ready, but the program has not shown that it took the turn: end
	// only if nothing changes for the quiet window.
	if w.timer == nil {
		w.timer = time.AfterFunc(s.quiet, w.fire)
	} else {
		w.timer.Reset(s.quiet)
	}
	return false
}

func (w *watch) stopTimerLocked() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// stop disarms the watch.
func (w *watch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopTimerLocked()
}
