package pty

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
)

const (
	pasteStart = "\x1b[200~"
	pasteEnd   = "\x1b[201~"
	enterKey   = "\r"
	exitWait   = 5 * time.Second
)

// turnState is the running turn.
type turnState struct {
	cancelReq chan struct{}
	ended     chan struct{}
}

// Prompt types p.Text into the program and waits for the turn to end. The
// clear keys (Spec.PTY.ClearKeys) go first, then the text as a bracketed
// paste when the program enabled bracketed paste mode (otherwise as typed,
// newlines as Enter), control characters removed, followed after
// SubmitDelay by Enter. The turn ends when the
// screen matches the ready pattern again after new output, or, without a
// pattern, when the output has been quiet for the quiet window (see
// Config.BusyPattern for programs that show their prompt while working).
//
// During the turn emit receives the raw output (pty.output); at its end one
// message.chunk (role agent) with the text that appeared on the screen
// since the prompt, less the echoed prompt (wherever it is among the new
// rows), the ready prompt and the rows that match Spec.PTY.IgnorePatterns,
// and a pty.screen snapshot. Cancelling ctx, Cancel and the turn deadline
// send the cancel keys (no sooner than Spec.PTY.CancelMinInterval after
// the last ones) and wait up to CancelGrace for the ready prompt, sending
// the clear keys every ClearInterval while the screen is neither ready nor
// busy (the result is then StopCancelled, or StopTimeout with
// ErrTurnTimeout); a program that does not come back is killed
// (ErrIgnoredCancel), an expected exit. Prompt
// returns backends.ErrBusy during another turn or while a viewer holds the
// input (then wrapping ErrInputHeld too).
func (b *Backend) Prompt(ctx context.Context, p backends.Prompt, emit func(backends.Event)) (backends.TurnResult, error) {
	if emit == nil {
		emit = func(backends.Event) {}
	}
	b.mu.Lock()
	switch {
	case !b.ready:
		b.mu.Unlock()
		return backends.TurnResult{}, backends.ErrNotStarted
	case b.stopping || b.hasExited():
		b.mu.Unlock()
		return backends.TurnResult{}, backends.ErrExited
	case b.turn != nil:
		b.mu.Unlock()
		return backends.TurnResult{}, backends.ErrBusy
	case b.writer != "":
		b.mu.Unlock()
		return backends.TurnResult{}, fmt.Errorf("%w: %w", backends.ErrBusy, ErrInputHeld)
	}
	t := &turnState{cancelReq: make(chan struct{}, 1), ended: make(chan struct{})}
	b.turn = t
	b.mu.Unlock()
	start := b.now()

	// Output from before the turn belongs outside it.
	b.emitMu.Lock()
	b.flushOutputLocked()
	b.turnEmit = emit
	b.emitMu.Unlock()

	b.termMu.Lock()
	before := b.scr.lines()
	bracketed := b.scr.bracketed
	b.termMu.Unlock()

	typed := p.Text
	if p.Briefing != nil && p.Briefing.Text != "" {
		// A program in a terminal takes only what is typed: the briefing
		// is pasted ahead of the user's words.
		typed = p.Briefing.Text + "\n\n" + typed
	}
	res, err := b.runTurn(ctx, t, typed, bracketed)
	b.disarm()

	b.termMu.Lock()
	after := b.scr.lines()
	snap := b.scr.snapshot()
	b.termMu.Unlock()
	skip := readyRows(b.pattern, after, snap.Cursor)
	text := turnText(before, after, p.Text, skip, b.ignore)

	b.emitMu.Lock()
	b.flushOutputLocked()
	if text != "" {
		b.emitLocked(b.event(backends.EventMessageChunk, backends.ChunkData{Role: backends.RoleAgent, Text: text}))
	}
	b.emitLocked(b.event(backends.EventPTYScreen, snap))
	b.turnEmit = nil
	b.emitMu.Unlock()

	b.mu.Lock()
	b.turn = nil
	b.mu.Unlock()
	close(t.ended)
	res.Duration = b.now().Sub(start)
	return res, err
}

func (b *Backend) runTurn(ctx context.Context, t *turnState, text string, bracketed bool) (backends.TurnResult, error) {
	if len(b.clear) > 0 {
		if err := b.writeTerm(b.clear); err != nil {
			return backends.TurnResult{StopReason: backends.StopError}, fmt.Errorf("clear input: %w", err)
		}
	}
	if err := b.writeTerm(pasteBytes(text, bracketed)); err != nil {
		return backends.TurnResult{StopReason: backends.StopError}, fmt.Errorf("type prompt: %w", err)
	}
	if d := b.cfg.SubmitDelay; d > 0 {
		pause := time.NewTimer(d)
		select {
		case <-pause.C:
		case <-b.procDone:
			pause.Stop()
		}
	}
	// Armed before Enter: the answer may come back at once.
	w := b.arm(b.watchSpec(true, true))
	if err := b.writeTerm([]byte(enterKey)); err != nil {
		return backends.TurnResult{StopReason: backends.StopError}, fmt.Errorf("submit prompt: %w", err)
	}
	turnDeadline := b.cfg.Spec.TurnDeadline()
	deadline := time.NewTimer(turnDeadline)
	defer deadline.Stop()
	var grace, delay *time.Timer
	var clear *time.Ticker
	var graceC, delayC, clearC <-chan time.Time
	reason, ignored := "", false
	sendCancel := func() {
		b.sendCancelKeys()
		grace = time.NewTimer(b.cfg.CancelGrace)
		graceC = grace.C
		if len(b.clear) > 0 {
			clear = time.NewTicker(ClearInterval)
			clearC = clear.C
		}
	}
	// A second cancel of the same turn is merged into the first; one
	// too soon after the last cancel keys waits for the rest of the
	// interval (and is merged into the turn's end if it comes first).
	cancelTurn := func(why string) {
		if reason != "" {
			return
		}
		reason = why
		w = b.arm(b.watchSpec(true, false))
		if wait := b.cancelWait(); wait > 0 {
			b.logger.Debug("cancel keys held back", "wait", wait)
			delay = time.NewTimer(wait)
			delayC = delay.C
			return
		}
		sendCancel()
	}
	defer func() {
		for _, t := range []*time.Timer{grace, delay} {
			if t != nil {
				t.Stop()
			}
		}
		if clear != nil {
			clear.Stop()
		}
	}()
	ctxDone := ctx.Done()
	for {
		select {
		case <-w.Ready():
			switch reason {
			case "":
				return backends.TurnResult{StopReason: backends.StopEndTurn}, nil
			case "timeout":
				return backends.TurnResult{StopReason: backends.StopTimeout}, fmt.Errorf("%w after %s", ErrTurnTimeout, turnDeadline)
			default:
				return backends.TurnResult{StopReason: backends.StopCancelled}, nil
			}
		case <-b.procDone:
			return b.exitedDuringTurn(reason, ignored, turnDeadline)
		case <-ctxDone:
			ctxDone = nil
			cancelTurn("context")
		case <-t.cancelReq:
			cancelTurn("cancel")
		case <-deadline.C:
			cancelTurn("timeout")
		case <-delayC:
			delayC = nil
			sendCancel()
		case <-clearC:
			b.clearIfStuck()
		case <-graceC:
			graceC, clearC, ignored = nil, nil, true
			b.killOwn(fmt.Errorf("%w within %s", ErrIgnoredCancel, b.cfg.CancelGrace))
		}
	}
}

// exitedDuringTurn explains a turn that ended with the program.
func (b *Backend) exitedDuringTurn(reason string, ignored bool, deadline time.Duration) (backends.TurnResult, error) {
	select {
	case <-b.done:
	case <-time.After(exitWait):
	}
	cause := b.Err()
	if cause == nil {
		b.mu.Lock()
		own, ee := b.ownKill, b.exitErr
		b.mu.Unlock()
		switch {
		case own != nil && ee != nil:
			cause = fmt.Errorf("%w: %w", own, ee)
		case own != nil:
			cause = own
		default:
			cause = backends.ErrExited
		}
	}
	res := backends.TurnResult{StopReason: backends.StopError}
	switch {
	case ignored && reason == "timeout":
		res.StopReason = backends.StopTimeout
		return res, fmt.Errorf("%w after %s: %w", ErrTurnTimeout, deadline, cause)
	case ignored:
		return res, fmt.Errorf("cancel turn: %w", cause)
	}
	return res, fmt.Errorf("turn failed: %w", cause)
}

// sendCancelKeys writes the cancel keys and notes when.
func (b *Backend) sendCancelKeys() {
	if err := b.writeTerm(b.cancel); err != nil {
		b.logger.Debug("send cancel keys", "err", err)
	}
	b.mu.Lock()
	b.lastCancel = b.now()
	b.mu.Unlock()
}

// cancelWait returns how long the cancel keys must wait to keep
// Spec.PTY.CancelMinInterval after the last ones.
func (b *Backend) cancelWait() time.Duration {
	least := b.cfg.Spec.PTY.CancelMinInterval
	if least <= 0 {
		return 0
	}
	b.mu.Lock()
	last := b.lastCancel
	b.mu.Unlock()
	if last.IsZero() {
		return 0
	}
	return last.Add(least + CancelSlack).Sub(b.now())
}

// clearIfStuck sends the clear keys when the screen is neither busy nor
// ready: after a cancel, the program is back at its prompt with the
// cancelled text (or a part of it) still in its input.
func (b *Backend) clearIfStuck() {
	b.termMu.Lock()
	text := b.scr.render()
	stuck := (b.busy == nil || !b.busy.Match(text)) && (b.pattern == nil || !b.pattern.Match(text))
	b.termMu.Unlock()
	if !stuck {
		return
	}
	if err := b.writeTerm(b.clear); err != nil {
		b.logger.Debug("send clear keys", "err", err)
	}
}

// arm replaces the readiness watch. Without needOutput the current screen
// is checked at once.
func (b *Backend) arm(spec watchSpec) *watch {
	w := newWatch(spec)
	b.termMu.Lock()
	defer b.termMu.Unlock()
	if b.watch != nil {
		b.watch.stop()
	}
	b.watch = w
	w.check(b.scr.render())
	return w
}

func (b *Backend) disarm() {
	b.termMu.Lock()
	defer b.termMu.Unlock()
	if b.watch != nil {
		b.watch.stop()
		b.watch = nil
	}
}

// Cancel sends the cancel keys (Spec.PTY.CancelKeys, Ctrl-C by default) to
// the running turn and waits until the turn has ended: the ready prompt came
// back, or the program was killed for ignoring them. Within
// Spec.PTY.CancelMinInterval of the last cancel keys it waits before
// sending them; a second Cancel of a turn sends nothing more. Without a
// turn it does nothing.
func (b *Backend) Cancel(ctx context.Context) error {
	b.mu.Lock()
	t := b.turn
	b.mu.Unlock()
	if t == nil {
		return nil
	}
	return backends.AwaitCancel(ctx, t.cancelReq, t.ended)
}

// pasteBytes is what a terminal sends when text is pasted into it: the
// text without control characters (so it cannot end the paste or send
// keys), newlines as carriage returns, inside bracketed-paste markers when
// the program asked for them.
func pasteBytes(text string, bracketed bool) []byte {
	var sb strings.Builder
	if bracketed {
		sb.WriteString(pasteStart)
	}
	text = strings.ReplaceAll(text, "\r\n", "\n")
	for _, r := range text {
		switch {
		case r == '\n' || r == '\r':
			sb.WriteByte('\r')
		case r == '\t':
			sb.WriteByte('\t')
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			// dropped
		default:
			sb.WriteRune(r)
		}
	}
	if bracketed {
		sb.WriteString(pasteEnd)
	}
	return []byte(sb.String())
}
