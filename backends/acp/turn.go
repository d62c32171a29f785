package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/backends"
)

// turnState is the running turn.
type turnState struct {
	id        int64
	emit      func(backends.Event)
	cancelReq chan struct{}
	ended     chan struct{}
	sent      chan struct{} // closed once session/prompt has been written
	// answer receives the agent's successful answer straight from the
	// filter, ahead of the SDK's own copy (which still arrives, unread).
	answer chan promptResult
}

type promptResult struct {
	resp acpsdk.PromptResponse
	err  error
}

// Prompt runs one turn. Events go to emit in arrival order until the agent
// answers; updates that arrive later go to Config.OnEvent. Cancelling ctx
// cancels the turn the protocol's way (session/cancel) and still waits for
// the agent's answer, within the cancel grace. The turn deadline
// (Spec.TurnTimeout) does the same and returns ErrTurnTimeout.
func (b *Backend) Prompt(ctx context.Context, p backends.Prompt, emit func(backends.Event)) (backends.TurnResult, error) {
	if emit == nil {
		emit = func(backends.Event) {}
	}
	b.mu.Lock()
	switch {
	case b.proc == nil || b.sessionID == "":
		b.mu.Unlock()
		return backends.TurnResult{}, backends.ErrNotStarted
	case b.exited():
		b.mu.Unlock()
		return backends.TurnResult{}, backends.ErrExited
	case b.turn != nil:
		b.mu.Unlock()
		return backends.TurnResult{}, backends.ErrBusy
	}
	if ctx.Err() != nil {
		b.mu.Unlock()
		return backends.TurnResult{StopReason: backends.StopCancelled}, nil
	}
	t := &turnState{id: p.Turn, emit: emit, cancelReq: make(chan struct{}, 1), ended: make(chan struct{}), sent: make(chan struct{}), answer: make(chan promptResult, 1)}
	b.turn = t
	b.permCtx, b.permStop = context.WithCancel(b.ctx)
	sid := b.sessionID
	b.mu.Unlock()

	start := time.Now()
	ch := make(chan promptResult, 1)
	go func() {
		// The backend's own context: cancelling a Prompt's context would
		// drop the agent's real "cancelled" answer (ACP-NOTES).
		r, err := b.conn.Prompt(b.ctx, acpsdk.PromptRequest{SessionId: acpsdk.SessionId(sid), Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock(p.Text)}})
		ch <- promptResult{r, err}
	}()

	deadline := time.NewTimer(b.cfg.Spec.TurnDeadline())
	defer deadline.Stop()
	var grace *time.Timer
	var graceC <-chan time.Time
	reason := ""
	// A cancel is held until session/prompt is on the wire, so the agent
	// never sees session/cancel before the prompt it cancels.
	pending := ""
	sentC := t.sent
	cancelTurn := func(why string) {
		if reason != "" {
			return
		}
		if sentC != nil {
			if pending == "" {
				pending = why
			}
			return
		}
		reason = why
		b.sendCancel(sid)
		grace = time.NewTimer(b.cfg.CancelGrace)
		graceC = grace.C
	}
	ctxDone := ctx.Done()
	var r promptResult
wait:
	for {
		select {
		case r = <-ch:
			break wait
		case r = <-t.answer:
			break wait
		case <-sentC:
			sentC = nil
			if pending != "" {
				cancelTurn(pending)
			}
		case <-ctxDone:
			ctxDone = nil
			cancelTurn("context")
		case <-t.cancelReq:
			cancelTurn("cancel")
		case <-deadline.C:
			cancelTurn("timeout")
		case <-graceC:
			graceC = nil
			b.fail(fmt.Errorf("%w: no answer within %s", ErrIgnoredCancel, b.cfg.CancelGrace))
		}
	}
	if grace != nil {
		grace.Stop()
	}
	// Every update that arrived before the answer belongs to this turn.
	b.mu.Lock()
	mark := b.promptMark
	if !b.promptMarked {
		mark = b.queue.pushedCount()
	}
	b.mu.Unlock()
	b.queue.waitDelivered(mark)
	b.mu.Lock()
	b.turn = nil
	b.promptID, b.promptMarked = "", false
	b.permStop()
	b.mu.Unlock()
	close(t.ended)

	res := backends.TurnResult{StopReason: backends.StopReason(r.resp.StopReason), Duration: time.Since(start)}
	if r.resp.Usage != nil {
		res.Usage = backends.MustJSON(r.resp.Usage)
	}
	if r.err != nil {
		res.StopReason = backends.StopError
		err := b.turnError(r.err)
		if reason == "timeout" {
			res.StopReason = backends.StopTimeout
			err = fmt.Errorf("%w after %s: %w", ErrTurnTimeout, b.cfg.Spec.TurnDeadline(), err)
		}
		return res, err
	}
	if reason == "timeout" {
		res.StopReason = backends.StopTimeout
		return res, fmt.Errorf("%w after %s (the agent answered %q to session/cancel)", ErrTurnTimeout, b.cfg.Spec.TurnDeadline(), r.resp.StopReason)
	}
	return res, nil
}

// turnError explains a failed session/prompt: when the agent died, its exit
// status and stderr tail; otherwise the protocol error with its data.
func (b *Backend) turnError(err error) error {
	disconnected := false
	select {
	case <-b.conn.Done():
		disconnected = true
	default:
	}
	b.mu.Lock()
	failed := b.fatal != nil
	b.mu.Unlock()
	if failed || disconnected || b.ctx.Err() != nil || b.exited() {
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
		}
		if cause := b.Err(); cause != nil {
			return fmt.Errorf("turn failed: %w", cause)
		}
		return fmt.Errorf("turn failed: %w", backends.ErrExited)
	}
	var re *acpsdk.RequestError
	if errors.As(err, &re) {
		return fmt.Errorf("turn failed: agent error %d %s: %w", re.Code, re.Message, err)
	}
	return fmt.Errorf("turn failed: %w", err)
}

// sendCancel answers pending permission requests "cancelled" and sends
// session/cancel.
func (b *Backend) sendCancel(sid string) {
	// The notification first, so the agent knows why its pending
	// permission requests are answered "cancelled".
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.WriteTimeout)
	defer cancel()
	if err := b.conn.Cancel(ctx, acpsdk.CancelNotification{SessionId: acpsdk.SessionId(sid)}); err != nil {
		b.logger.Debug("session/cancel", "err", err)
	}
	b.mu.Lock()
	b.permStop()
	b.mu.Unlock()
}

// Cancel asks the agent to end the running turn and waits until the turn
// has ended: with the agent's "cancelled" answer, or by stopping an agent
// that does not answer within the cancel grace. Without a turn it does
// nothing.
func (b *Backend) Cancel(ctx context.Context) error {
	b.mu.Lock()
	t := b.turn
	b.mu.Unlock()
	if t == nil {
		return nil
	}
	select {
	case t.cancelReq <- struct{}{}:
	default:
	}
	select {
	case <-t.ended:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cancel turn: %w", ctx.Err())
	}
}

// SetMode switches the session mode (session/set_mode).
func (b *Backend) SetMode(ctx context.Context, modeID string) error {
	b.mu.Lock()
	sid := b.sessionID
	b.mu.Unlock()
	if sid == "" {
		return backends.ErrNotStarted
	}
	if _, err := b.conn.SetSessionMode(ctx, acpsdk.SetSessionModeRequest{SessionId: acpsdk.SessionId(sid), ModeId: acpsdk.SessionModeId(modeID)}); err != nil {
		return fmt.Errorf("set mode %q: %w", modeID, err)
	}
	b.mu.Lock()
	b.info.CurrentMode = modeID
	b.mu.Unlock()
	return nil
}

// SetConfigOption sets a session config option to a value id
// (session/set_config_option).
func (b *Backend) SetConfigOption(ctx context.Context, id, value string) error {
	b.mu.Lock()
	sid := b.sessionID
	b.mu.Unlock()
	if sid == "" {
		return backends.ErrNotStarted
	}
	resp, err := b.conn.SetSessionConfigOption(ctx, acpsdk.SetSessionConfigOptionRequest{ValueId: &acpsdk.SetSessionConfigOptionValueId{
		SessionId: acpsdk.SessionId(sid), ConfigId: acpsdk.SessionConfigId(id), Value: acpsdk.SessionConfigValueId(value),
	}})
	if err != nil {
		return fmt.Errorf("set config option %q: %w", id, err)
	}
	if len(resp.ConfigOptions) > 0 {
		raw, _ := json.Marshal(resp.ConfigOptions)
		b.mu.Lock()
		b.info.ConfigOptions = raw
		b.mu.Unlock()
	}
	return nil
}

// Stop ends the agent: session/cancel if a turn runs, close stdin, SIGTERM
// the group, SIGKILL the group. It returns when the process and the
// backend's goroutines are gone, or when ctx ends. It is idempotent.
func (b *Backend) Stop(ctx context.Context) error {
	b.mu.Lock()
	proc, t, sid := b.proc, b.turn, b.sessionID
	b.mu.Unlock()
	if proc == nil {
		b.stopOnce.Do(func() { b.cancel(backends.ErrNotStarted); close(b.done) })
		return nil
	}
	if t != nil && !b.exited() {
		b.sendCancel(sid)
	}
	err := proc.Stop(ctx)
	select {
	case <-b.done:
	case <-ctx.Done():
		return fmt.Errorf("stop agent %q: %w", b.cfg.Spec.Provider, ctx.Err())
	}
	return err
}
