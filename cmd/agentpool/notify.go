package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// Defaults of the notify command.
const (
	// notifyTimeout bounds one run of the command; it is then killed.
	notifyTimeout = 10 * time.Second
	// notifyRunning is how many runs may be in progress at once.
	notifyRunning = 2
	// notifyBacklog is how many notifications may wait for a run; past it
	// the newest are dropped (and counted), never the pool slowed.
	notifyBacklog = 64
	// notifyOutput is how much of a run's output is kept for the log.
	notifyOutput = 4 << 10
)

// Notifier runs the user's notify command for the events a person wants to
// hear about while away: a permission request waiting for them, a turn that
// ended, an agent that failed. The event goes to the command's stdin as one
// JSON object (the same as on the API's event streams); AGENTPOOL_EVENT,
// AGENTPOOL_SESSION and AGENTPOOL_AGENT carry its type, session and agent.
// The command runs as the daemon's user, unconfined (it is the user's own
// configuration), with a timeout; runs are bounded in number and a backlog
// past its bound is dropped, so a slow or stuck command never slows the
// pool.
type Notifier struct {
	// Command is the argv to run; a single element is run with /bin/sh -c.
	Command []string
	// Timeout bounds one run (0 = notifyTimeout).
	Timeout time.Duration
	// Logger receives failures (nil = slog.Default()).
	Logger *slog.Logger

	// Dropped counts notifications dropped because the backlog was full.
	Dropped atomic.Int64
	// Runs counts the runs started.
	Runs atomic.Int64
}

// notable reports whether ev is worth a notification.
func notable(ev backends.Event) bool {
	switch ev.Type {
	case backends.EventPermissionRequest, backends.EventTurnEnded:
		return true
	case backends.EventAgentExited:
		var d backends.ExitData
		return json.Unmarshal(ev.Data, &d) == nil && !d.Expected
	}
	return false
}

// Run reads the daemon-wide event stream from subscribe until ctx ends, and
// runs the command for each notable event. A subscription dropped for
// falling behind is made again. Run returns once every run it started has
// ended.
func (n *Notifier) Run(ctx context.Context, subscribe func() *pool.Subscription) {
	log := n.Logger
	if log == nil {
		log = slog.Default()
	}
	backlog := make(chan backends.Event, notifyBacklog)
	var wg sync.WaitGroup
	for range notifyRunning {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range backlog {
				n.run(ctx, log, ev)
			}
		}()
	}
	defer wg.Wait()
	defer close(backlog)
	sub := subscribe()
	defer func() { sub.Close() }()
	for {
		evs, err := sub.Next(ctx, 0)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// Dropped for falling behind, or the feed ended: start again
			// from now; what was missed is in the event log.
			log.Warn("notify: event stream interrupted; resubscribing", "err", err)
			sub.Close()
			sub = subscribe()
			continue
		}
		for _, ev := range evs {
			if !notable(ev) {
				continue
			}
			select {
			case backlog <- ev:
			default:
				if d := n.Dropped.Add(1); d&(d-1) == 0 {
					log.Warn("notify: command too slow; notifications dropped", "dropped", d)
				}
			}
		}
	}
}

// run runs the command once for ev.
func (n *Notifier) run(ctx context.Context, log *slog.Logger, ev backends.Event) {
	if ctx.Err() != nil {
		return
	}
	n.Runs.Add(1)
	timeout := n.Timeout
	if timeout <= 0 {
		timeout = notifyTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := n.Command
	if len(argv) == 1 {
		argv = []string{"/bin/sh", "-c", argv[0]}
	}
	cmd := exec.CommandContext(rctx, argv[0], argv[1:]...)
	body, _ := json.Marshal(ev)
	cmd.Stdin = bytes.NewReader(append(body, '\n'))
	out := &cappedBuffer{limit: notifyOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(backends.TrustedEnv(), "AGENTPOOL_EVENT="+string(ev.Type), "AGENTPOOL_SESSION="+ev.Session, "AGENTPOOL_AGENT="+ev.Agent)
	// Its own process group, killed whole at the timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	switch {
	case err == nil:
		log.Debug("notify: ran", "event", ev.Type, "session", ev.Session)
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		log.Warn("notify: command timed out", "timeout", timeout, "event", ev.Type, "output", out.String())
	case ctx.Err() == nil:
		log.Warn("notify: command failed", "err", err, "event", ev.Type, "output", out.String())
	}
}

// cappedBuffer keeps the first limit bytes written to it.
type cappedBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.limit - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

var _ io.Writer = (*cappedBuffer)(nil)
