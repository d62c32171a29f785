package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/httpapi"
)

// detachKey ends an attach session: Ctrl-], as in telnet.
const detachKey = 0x1d

// attachReadSize is the largest chunk of keystrokes sent in one message.
const attachReadSize = 32 << 10

// attachSendTimeout bounds sending one message to the daemon.
const attachSendTimeout = 10 * time.Second

func (c *cli) attach(ctx context.Context, args []string) error {
	fs := c.flagSet("attach", "attach SESSION [--agent ID]\n\n"+
		"Shows the terminal of a session's terminal (pty) agent and types into it, as if it ran here.\n"+
		"It takes the input on start (others may watch; one types at a time). Ctrl-] detaches.")
	agent := fs.String("agent", "", "the agent to attach to (default: the session's active agent)")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	conn, err := api.Attach(ctx, pos[0], *agent)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The screen passes through, but not its clipboard writes or title
	// changes: they are the agent's, and reach beyond its screen.
	l := &attachLoop{conn: conn, in: c.stdin, out: newOSCFilter(c.stdout), errw: c.stderr}
	if f, ok := c.stdin.(*os.File); ok {
		in, closeIn, err := pollable(f)
		if err != nil {
			return err
		}
		defer closeIn()
		l.in = in
	}
	if c.inTTY {
		f := c.stdin.(*os.File)
		restore, err := rawTerminal(int(f.Fd()))
		if err != nil {
			return err
		}
		defer restore()
		l.size = func() (int, int, bool) { return termSize(int(f.Fd())) }
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		l.winch = winch
	}
	fmt.Fprintf(c.stderr, "attached to %s (Ctrl-] detaches)\r\n", pos[0])
	err = l.run(ctx)
	fmt.Fprint(c.stderr, "\r\n")
	return err
}

// attachLoop copies keystrokes to an attach stream and its output back.
type attachLoop struct {
	conn *httpapi.AttachConn
	// in gives keystrokes; if it has SetReadDeadline, the loop uses it to
	// stop its reader when the stream ends.
	in   io.Reader
	out  io.Writer
	errw io.Writer
	// size returns the local terminal's size (nil or !ok: unknown), sent
	// at start and on every value of winch.
	size  func() (cols, rows int, ok bool)
	winch <-chan os.Signal
}

// run takes the input, then pumps until detach (Ctrl-] or the end of
// in), the end of the stream, or ctx. A detach or a stream the agent's
// exit ended is success.
func (l *attachLoop) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := l.send(ctx, func(ctx context.Context) error { return l.conn.Take(ctx) }); err != nil {
		return err
	}
	l.resize(ctx)
	var detached sync.Once
	detach := func() { detached.Do(cancel) }
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(2)
	go func() { defer wg.Done(); l.keys(ctx, detach) }()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.winch:
				l.resize(ctx)
			}
		}
	}()
	defer l.unblockInput()
	defer cancel()
	return l.output(ctx)
}

// output writes the stream's output until it ends.
func (l *attachLoop) output(ctx context.Context) error {
	for {
		p, msg, err := l.conn.Next(ctx)
		var end *httpapi.AttachEnd
		switch {
		case errors.As(err, &end):
			fmt.Fprintf(l.errw, "\r\n[%s]", endText(end))
			if end.Reason == httpapi.AttachEndExited {
				return nil
			}
			return fmt.Errorf("attach: %w", end)
		case err != nil && ctx.Err() != nil:
			return nil // detached
		case err != nil:
			return err
		}
		if p != nil {
			if _, err := l.out.Write(p); err != nil {
				return fmt.Errorf("attach: write output: %w", err)
			}
			continue
		}
		if msg.Type == httpapi.AttachError {
			fmt.Fprintf(l.errw, "\r\n[agentpool: %s: %s]\r\n", termLine(msg.Code), termLine(msg.Message))
		}
	}
}

// endText says why a stream ended, for people.
func endText(e *httpapi.AttachEnd) string {
	switch e.Reason {
	case httpapi.AttachEndExited:
		return "the agent exited"
	case httpapi.AttachEndShutdown:
		return "the daemon is shutting down"
	case httpapi.AttachEndDropped:
		return "dropped: this terminal fell behind the output"
	}
	return e.Error()
}

// keys sends keystrokes until the detach key, the end of in, or ctx.
func (l *attachLoop) keys(ctx context.Context, detach func()) {
	defer detach()
	buf := make([]byte, attachReadSize)
	for ctx.Err() == nil {
		n, err := l.in.Read(buf)
		p := buf[:n]
		i := bytes.IndexByte(p, detachKey)
		if i >= 0 {
			p = p[:i]
		}
		if len(p) > 0 {
			if serr := l.send(ctx, func(ctx context.Context) error { return l.conn.Input(ctx, p) }); serr != nil {
				return
			}
		}
		if i >= 0 || err != nil {
			return
		}
	}
}

// resize sends the local terminal's size, if known.
func (l *attachLoop) resize(ctx context.Context) {
	if l.size == nil {
		return
	}
	if cols, rows, ok := l.size(); ok {
		_ = l.send(ctx, func(ctx context.Context) error { return l.conn.Resize(ctx, cols, rows) })
	}
}

// send runs one send within attachSendTimeout.
func (l *attachLoop) send(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, attachSendTimeout)
	defer cancel()
	return f(ctx)
}

// unblockInput ends a pending read of in, if in supports deadlines.
func (l *attachLoop) unblockInput() {
	if d, ok := l.in.(interface{ SetReadDeadline(time.Time) error }); ok {
		_ = d.SetReadDeadline(time.Unix(1, 0))
	}
}

// rawTerminal puts the terminal fd in raw mode (as cfmakeraw, through the
// TCGETS/TCSETS ioctls) and returns the function that restores it.
func rawTerminal(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("raw terminal: %w", err)
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN] = 1
	raw.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, fmt.Errorf("raw terminal: %w", err)
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// pollable returns a copy of f that Go's poller serves, so that a read
// can be ended with a deadline, and the function that closes it and puts
// f back in blocking mode (the mode is shared by both descriptors).
func pollable(f *os.File) (*os.File, func(), error) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, nil, fmt.Errorf("stdin: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, nil, fmt.Errorf("stdin: %w", err)
	}
	nf := os.NewFile(uintptr(fd), f.Name())
	return nf, func() {
		_ = nf.Close()
		_ = unix.SetNonblock(int(f.Fd()), false)
	}, nil
}

// termSize returns the size of the terminal fd.
func termSize(fd int) (cols, rows int, ok bool) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 || ws.Row == 0 {
		return 0, 0, false
	}
	return int(ws.Col), int(ws.Row), true
}
