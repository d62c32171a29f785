package pty

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// readLoop is the only reader of the terminal. Each chunk goes into the
// pty.output buffer, then to the emulator, the viewers and the readiness
// watch in one step under termMu. It never waits for a consumer.
func (b *Backend) readLoop(done chan struct{}) {
	defer b.wg.Done()
	defer close(done)
	buf := make([]byte, readBufSize)
	for {
		n, err := b.master.Read(buf)
		if n > 0 {
			b.consume(buf[:n])
		}
		if err != nil {
			// EIO: every holder of the terminal's other end has gone;
			// ErrClosed: we hung up.
			if !errors.Is(err, syscall.EIO) && !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) {
				b.logger.Debug("read terminal", "err", err)
			}
			return
		}
	}
}

func (b *Backend) consume(p []byte) {
	// Buffered first: the turn that this chunk ends flushes it.
	b.appendOutput(p)
	b.termMu.Lock()
	b.scr.write(p)
	if len(b.viewers) > 0 {
		chunk := bytes.Clone(p)
		for a := range b.viewers {
			select {
			case a.ch <- chunk:
			default:
				b.dropViewerLocked(a, ErrSlowViewer)
			}
		}
	}
	if w := b.watch; w != nil {
		w.output(b.scr.render)
	}
	b.termMu.Unlock()
}

// appendOutput adds p to the pending pty.output bytes, up to OutputLimit,
// and wakes the flusher.
func (b *Backend) appendOutput(p []byte) {
	b.outMu.Lock()
	wasEmpty := len(b.outBuf) == 0 && b.outDropped == 0
	room := b.cfg.OutputLimit - len(b.outBuf)
	if room > len(p) {
		room = len(p)
	}
	if room > 0 {
		b.outBuf = append(b.outBuf, p[:room]...)
	}
	b.outDropped += len(p) - max(room, 0)
	b.outMu.Unlock()
	if wasEmpty {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

// flushLoop turns the pending output into one pty.output event per
// OutputInterval while output flows, and sleeps while it does not.
func (b *Backend) flushLoop() {
	defer b.wg.Done()
	t := time.NewTimer(b.cfg.OutputInterval)
	t.Stop()
	for {
		select {
		case <-b.quit:
			b.flushOutput()
			return
		case <-b.kick:
		}
		t.Reset(b.cfg.OutputInterval)
		select {
		case <-b.quit:
			t.Stop()
			b.flushOutput()
			return
		case <-t.C:
		}
		b.flushOutput()
	}
}

func (b *Backend) flushOutput() {
	b.emitMu.Lock()
	defer b.emitMu.Unlock()
	b.flushOutputLocked()
}

// flushOutputLocked emits the pending output; emitMu is held, so events
// keep their order whoever flushes.
func (b *Backend) flushOutputLocked() {
	b.outMu.Lock()
	data := OutputData{Bytes: b.outBuf, Dropped: b.outDropped}
	b.outBuf, b.outDropped = nil, 0
	b.outMu.Unlock()
	if len(data.Bytes) == 0 && data.Dropped == 0 {
		return
	}
	b.emitLocked(b.event(backends.EventPTYOutput, data))
}

// replyWriter receives the emulator's answers to terminal queries (cursor
// position, status). They are written by answerLoop, never by the reader,
// and only while no viewer holds the input: then the viewer's own terminal
// answers.
type replyWriter struct{ b *Backend }

func (r replyWriter) Write(p []byte) (int, error) {
	if r.b.held.Load() {
		return len(p), nil
	}
	select {
	case r.b.replies <- bytes.Clone(p):
	default: // a program flooding queries loses some answers
	}
	return len(p), nil
}

func (b *Backend) answerLoop() {
	defer b.wg.Done()
	for {
		select {
		case <-b.quit:
			return
		case p := <-b.replies:
			if err := b.writeTerm(p); err != nil {
				b.logger.Debug("answer terminal query", "err", err)
			}
		}
	}
}

// writeTerm writes p to the terminal within WriteTimeout. Writes never
// interleave.
func (b *Backend) writeTerm(p []byte) error {
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	if b.master == nil {
		return backends.ErrNotStarted
	}
	if err := b.master.SetWriteDeadline(time.Now().Add(b.cfg.WriteTimeout)); err != nil {
		return fmt.Errorf("write terminal: %w", backends.ErrExited)
	}
	if _, err := b.master.Write(p); err != nil {
		if errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EIO) {
			return fmt.Errorf("write terminal: %w", backends.ErrExited)
		}
		return fmt.Errorf("write terminal: %w", err)
	}
	return nil
}
