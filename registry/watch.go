package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Run keeps the registry in step with the providers file until ctx is done
// or the registry is closed, then returns nil. It returns an error at once
// if Run is already running, or ErrClosed after Close. It watches the file's
// directory (and, when the file is a symlink into another directory, that
// one too), so that every way editors and tools replace a file is seen:
// write in place, rename over, remove, chmod, and a Kubernetes-style swap of
// a "..data" symlink. Events are debounced by Config.Debounce. When fsnotify
// cannot start, or the directory does not exist yet, Run polls every
// Config.PollInterval and retries the watch. With Config.SIGHUP it reloads
// on SIGHUP; with a Prober it refreshes stale probes. A bad file never
// stops Run: the last good config stays in force.
func (r *Registry) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("registry: Run is already running")
	}
	defer r.running.Store(false)
	if r.ctx.Err() != nil {
		return ErrClosed
	}
	var hup chan os.Signal
	if r.cfg.SIGHUP {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	w := &watch{r: r}
	defer w.close()
	if r.cfg.Path != "" {
		w.start()
	}
	var (
		deb      = newDebouncer(r.cfg.Debounce, maxDebounceFactor*r.cfg.Debounce)
		poll     <-chan time.Time
		probeTkr = time.NewTicker(probeCheckInterval)
	)
	defer deb.stop()
	defer probeTkr.Stop()
	if r.cfg.Path != "" {
		pt := time.NewTicker(r.cfg.PollInterval)
		defer pt.Stop()
		poll = pt.C
	}
	// The file may have changed between New and now.
	r.reloadIfChanged()
	r.probeStale()
	select {
	case <-r.runStarted:
	default:
		close(r.runStarted)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.ctx.Done():
			return nil
		case ev, ok := <-w.events():
			if !ok { // fsnotify gave up: poll and retry
				w.close()
				continue
			}
			if w.selfGone(ev) {
				r.log.Debug("providers directory gone; polling until it is back")
				w.close()
				deb.kick()
				continue
			}
			if w.interesting(ev) {
				deb.kick()
			}
		case err, ok := <-w.errors():
			if !ok {
				w.close()
				continue
			}
			// An overflow loses events: read the file to be sure.
			r.log.Warn("providers watcher error", logError, err)
			deb.kick()
		// Watches are (re)armed before the file is read, so that a write
		// between the two is never missed.
		case <-deb.c():
			deb.fired()
			w.refresh()
			r.reloadIfChanged()
			r.probeStale()
		case <-poll:
			if w.w == nil || r.cfg.ForcePolling {
				w.start()
				if r.reloadIfChanged() {
					r.probeStale()
				}
			}
		case <-hup:
			r.log.Info("SIGHUP: reloading providers")
			w.refresh()
			_ = r.Reload() // a bad file is logged and shown in the snapshot
			r.probeStale()
		case <-probeTkr.C:
			r.probeStale()
		}
	}
}

// reloadIfChanged reads the file and applies it if its bytes changed. It
// reports whether the snapshot changed.
func (r *Registry) reloadIfChanged() bool {
	before := r.cur.Load()
	_ = r.load(false) // a bad file is logged and shown in the snapshot
	return r.cur.Load() != before
}

// watch is the fsnotify side of Run, owned by Run's goroutine. w is nil
// while polling.
type watch struct {
	r    *Registry
	w    *fsnotify.Watcher
	dirs []string
	// names are the base names in the watched directories whose events
	// matter: the file, its symlink target, and "..*" entries.
	names map[string]bool
	// failing is set while the watch cannot be set up, to log that once.
	failing bool
}

// start sets up the watcher unless polling is forced or it runs already.
func (w *watch) start() {
	if w.w != nil || w.r.cfg.ForcePolling {
		return
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		w.r.log.Warn("cannot watch providers file; polling", logError, err)
		return
	}
	w.w, w.dirs = fw, nil
	if err := w.refreshErr(); err != nil {
		if !w.failing {
			w.r.log.Info("cannot watch the providers directory yet; polling", logError, err)
		}
		w.failing = true
		w.close()
		return
	}
	w.failing = false
}

// refresh re-arms the watches after the file or its symlink moved.
func (w *watch) refresh() {
	if w.w == nil {
		return
	}
	if err := w.refreshErr(); err != nil {
		w.r.log.Warn("providers watcher lost its directory; polling", logError, err)
		w.close()
	}
}

func (w *watch) refreshErr() error {
	path := w.r.cfg.Path
	dir := filepath.Dir(path)
	dirs := []string{dir}
	w.names = map[string]bool{filepath.Base(path): true}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		w.names[filepath.Base(real)] = true
		realDir := filepath.Dir(real)
		// A target inside dir (Kubernetes' "..data/providers.json") is seen
		// through dir; one elsewhere (a dotfiles repository) needs its own.
		if rel, err := filepath.Rel(dir, realDir); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			dirs = append(dirs, realDir)
		}
	}
	for _, d := range w.dirs {
		if !contains(dirs, d) {
			_ = w.w.Remove(d) // it may be gone already
		}
	}
	for _, d := range dirs {
		if contains(w.dirs, d) {
			continue
		}
		if err := w.w.Add(d); err != nil {
			if d == dir {
				return fmt.Errorf("watch %s: %w", d, err)
			}
			w.r.log.Warn("cannot watch the directory of the symlinked providers file", logError, err)
			continue
		}
	}
	w.dirs = dirs
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (w *watch) close() {
	if w.w != nil {
		_ = w.w.Close()
		w.w, w.dirs = nil, nil
	}
}

// events is the watcher's event channel, nil (never ready) while polling.
func (w *watch) events() <-chan fsnotify.Event {
	if w.w == nil {
		return nil
	}
	return w.w.Events
}

func (w *watch) errors() <-chan error {
	if w.w == nil {
		return nil
	}
	return w.w.Errors
}

// interesting reports whether ev may change what the file reads.
func (w *watch) interesting(ev fsnotify.Event) bool {
	base := filepath.Base(ev.Name)
	return w.names[base] || strings.HasPrefix(base, "..")
}

// selfGone reports whether ev says the main watched directory itself was
// removed or moved, which ends its watch.
func (w *watch) selfGone(ev fsnotify.Event) bool {
	return len(w.dirs) > 0 && ev.Name == w.dirs[0] && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename))
}

// debouncer turns bursts of kicks into one firing: it fires d after the
// last kick, but no later than limit after the first kick of the burst.
// It belongs to one goroutine.
type debouncer struct {
	d, limit time.Duration
	timer    *time.Timer
	armed    bool
	first    time.Time
}

func newDebouncer(d, limit time.Duration) *debouncer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &debouncer{d: d, limit: limit, timer: t}
}

// kick (re)arms the timer.
func (b *debouncer) kick() {
	now := time.Now()
	if !b.armed {
		b.armed, b.first = true, now
		b.timer.Reset(b.d)
		return
	}
	wait := min(b.d, b.limit-now.Sub(b.first))
	b.timer.Reset(max(wait, 0))
}

// c fires when the burst is over.
func (b *debouncer) c() <-chan time.Time { return b.timer.C }

// fired must be called after a value was received from c.
func (b *debouncer) fired() { b.armed = false }

func (b *debouncer) stop() { b.timer.Stop() }
