package pty

import (
	"regexp"
	"sync"
	"time"
)

// watch decides when the program is ready for input. With a pattern it is
// ready as soon as the rendered screen matches, checked by the reader right
// after each chunk of output has been fed to the emulator; with needOutput
// a match only counts once output arrived after the watch was armed, so the
// prompt still on the screen when a turn starts is not taken for the end of
// it. Without a pattern it is ready once no output has arrived for the
// quiet window.
type watch struct {
	pattern    *regexp.Regexp
	quiet      time.Duration
	needOutput bool
	ready      chan struct{}

	mu    sync.Mutex
	seen  bool
	fired bool
	timer *time.Timer
}

// newWatch arms a watch. In quiet mode the window starts now.
func newWatch(pattern *regexp.Regexp, quiet time.Duration, needOutput bool) *watch {
	w := &watch{pattern: pattern, quiet: quiet, needOutput: needOutput, ready: make(chan struct{})}
	if pattern == nil {
		w.timer = time.AfterFunc(quiet, w.fire)
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
	if w.pattern == nil {
		w.timer.Reset(w.quiet)
		return false
	}
	return w.checkLocked(screen())
}

// check tests the screen without new output (used when arming without
// needOutput). It reports whether the watch fired.
func (w *watch) check(text []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return true
	}
	if w.pattern == nil || (w.needOutput && !w.seen) {
		return false
	}
	return w.checkLocked(text)
}

func (w *watch) checkLocked(text []byte) bool {
	if !w.pattern.Match(text) {
		return false
	}
	w.fireLocked()
	return true
}

// stop disarms the watch.
func (w *watch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}
