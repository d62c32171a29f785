package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

const (
	// setupLookback bounds the young sessions whose history the prompt
	// command reads from the start to find a setup still running
	// (started, not ended), which the turn then waits for: a session
	// with more events than this is read from the prompt on, so a
	// prompt never replays a long history (whose events may be large).
	setupLookback = 256
	// setupShownLines bounds the setup's output lines the prompt command
	// shows while its turn waits; the rest is in the session's events.
	setupShownLines = 10
	// setupTailShown is how many last lines of a failed setup are shown.
	setupTailShown = 5
)

// setupWait shows, on the prompt command's notes, the progress of a
// worktree setup its turn waits for: a line when it starts (or, found in
// the events before the prompt, is still running), its output dimmed and
// bounded, and its end with the elapsed time, or the exit code and last
// lines of a failure.
type setupWait struct {
	r       *renderer
	self    string // the command's name, for hints
	session string
	running []string // the command of the setup running, nil when none
	shown   int      // output lines shown of the running setup
	more    bool     // output was left out
}

// before takes a setup event from before the prompt: it only tracks
// whether a setup is running; at the prompt's own position (last) a
// running one is announced.
func (w *setupWait) before(ev backends.Event, last bool) {
	d := decodeSetup(ev)
	switch ev.Type {
	case pool.EventSetupStarted:
		w.running = d.Command
		if w.running == nil {
			w.running = []string{}
		}
	case pool.EventSetupEnded, pool.EventSetupUntrusted:
		w.running = nil
	}
	if last && w.running != nil {
		w.announce()
	}
}

// announce says the turn waits for the running setup.
func (w *setupWait) announce() {
	w.r.line(w.r.note, "", "waiting for the worktree's setup: %s… (follow: %s events %s)", quoteArgs(w.running), w.self, w.session)
}

// event shows a setup event that came during the turn's wait.
func (w *setupWait) event(ev backends.Event) {
	d := decodeSetup(ev)
	switch ev.Type {
	case pool.EventSetupStarted:
		w.running, w.shown, w.more = d.Command, 0, false
		if w.running == nil {
			w.running = []string{}
		}
		w.announce()
	case pool.EventSetupOutput:
		for _, l := range strings.Split(strings.TrimRight(d.Output, "\n"), "\n") {
			if w.shown >= setupShownLines {
				w.more = true
				continue
			}
			w.shown++
			w.r.line(w.r.note, ansiDim, "  │ %s", oneLine(l, 160))
		}
	case pool.EventSetupEnded:
		w.end(d)
	default:
		if s := setupLine(ev); s != "" {
			w.r.line(w.r.note, "", "%s", s)
		}
	}
}

// end shows how the setup ended.
func (w *setupWait) end(d setupData) {
	if w.more {
		w.r.line(w.r.note, ansiDim, "  │ … (all its output: %s events %s)", w.self, w.session)
	}
	w.running, w.shown, w.more = nil, 0, false
	took := ""
	if d.Elapsed > 0 {
		took = " in " + time.Duration(d.Elapsed).Round(100*time.Millisecond).String()
	}
	if d.OK {
		w.r.line(w.r.note, ansiGreen, "setup ok%s", took)
		return
	}
	s := "setup failed" + took
	switch {
	case d.ExitCode != nil: // the error only says the command and its exit status
		s += fmt.Sprintf(" with exit code %d", *d.ExitCode)
	case d.Error != "":
		s += ": " + d.Error
	}
	w.r.line(w.r.note, ansiRed, "%s", s)
	tail := d.Tail
	if n := len(tail) - setupTailShown; n > 0 {
		tail = tail[n:]
	}
	for _, l := range tail {
		w.r.line(w.r.note, ansiRed, "  │ %s", oneLine(l, 160))
	}
}

// isSetupEvent says whether ev is a step of a worktree's setup.
func isSetupEvent(ev backends.Event) bool {
	return strings.HasPrefix(string(ev.Type), "setup.")
}

// decodeSetup decodes a setup event's data; a malformed one gives zeros.
func decodeSetup(ev backends.Event) setupData {
	var d setupData
	_ = json.Unmarshal(ev.Data, &d)
	return d
}
