package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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
	// answer receives the agent's answer to session/prompt from the
	// filter.
	answer chan promptResult
}

// promptResult is the agent's answer to session/prompt.
type promptResult struct {
	stopReason string
	usage      json.RawMessage // verbatim, nil when absent
	// userMessageID is the id the agent gave the prompt, if it did.
	userMessageID string
	err           error
}

// promptIDBase is where the ids of session/prompt requests start: the SDK
// numbers its own requests from 1 on each connection, so the two never
// meet.
const promptIDBase = 1 << 32

// errNoAnswer is the error of a turn whose agent's output ended before it
// answered session/prompt.
var errNoAnswer = errors.New("the agent's output ended before it answered session/prompt")

// Prompt runs one turn. Events go to emit in arrival order until the agent
// answers; updates that arrive later go to Config.OnEvent. Cancelling ctx
// cancels the turn the protocol's way (session/cancel) and still waits for
// the agent's answer, within the cancel grace. The turn deadline
// (Spec.TurnTimeout) does the same and returns ErrTurnTimeout.
//
// The first prompt after a session/load waits for the agent's replay of the
// conversation to go quiet before it is sent (replay.go); cancelled during
// that wait, it is never sent and the turn ends StopCancelled.
//
// The turn does not go through the SDK: session/prompt and session/cancel
// are written here and the filter hands the answer over, which spares two
// goroutine hops and a second encoding and decoding of each message.
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
	t := &turnState{id: p.Turn, emit: emit, cancelReq: make(chan struct{}, 1), ended: make(chan struct{}), answer: make(chan promptResult, 1)}
	b.turn = t
	b.permCtx, b.permStop = context.WithCancel(b.ctx)
	sid := b.sessionID
	embedded := b.info.EmbeddedContext
	b.prompts++
	b.toolCalls.startTurn()
	id := strconv.FormatInt(promptIDBase+b.prompts, 10)
	b.promptID, b.promptMarked = id, false
	b.mu.Unlock()
	b.holdForTurn(true)

	start := time.Now()
	r, reason := promptResult{stopReason: string(backends.StopCancelled)}, ""
	if b.awaitReplay(ctx, t) {
		r, reason = b.await(ctx, t, sid, id, blocksOf(p, embedded))
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
	b.holdForTurn(false)
	close(t.ended)

	res := backends.TurnResult{StopReason: backends.StopReason(r.stopReason), Duration: time.Since(start), Usage: r.usage, UserMessageID: r.userMessageID}
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
		return res, fmt.Errorf("%w after %s (the agent answered %q to session/cancel)", ErrTurnTimeout, b.cfg.Spec.TurnDeadline(), r.stopReason)
	}
	return res, nil
}

// await writes session/prompt and waits for its answer, sending
// session/cancel when ctx ends, Cancel is called or the turn deadline
// passes, and stopping the agent when it does not answer within the cancel
// grace after that. It returns the answer and why the turn was cancelled,
// if it was.
func (b *Backend) await(ctx context.Context, t *turnState, sid, id string, blocks []contentBlock) (r promptResult, reason string) {
	type params struct {
		SessionID string         `json:"sessionId"`
		Prompt    []contentBlock `json:"prompt"`
	}
	msg := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  params          `json:"params"`
	}{"2.0", json.RawMessage(id), "session/prompt", params{sid, blocks}}
	raw, err := json.Marshal(msg)
	if err != nil {
		return promptResult{err: fmt.Errorf("encode session/prompt: %w", err)}, ""
	}
	if _, err := b.out.Write(append(raw, '\n')); err != nil {
		return promptResult{err: err}, ""
	}

	deadline := time.NewTimer(b.cfg.Spec.TurnDeadline())
	defer deadline.Stop()
	var grace *time.Timer
	var graceC <-chan time.Time
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	cancelTurn := func(why string) {
		if reason != "" {
			return
		}
		reason = why
		b.sendCancel(sid)
		grace = time.NewTimer(b.cfg.CancelGrace)
		graceC = grace.C
	}
	ctxDone := ctx.Done()
	for {
		select {
		case r = <-t.answer:
			return r, reason
		case <-b.outputDone:
			// The filter hands the answer over before it ends.
			select {
			case r = <-t.answer:
			default:
				r.err = errNoAnswer
			}
			return r, reason
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
}

// turnError explains a failed session/prompt: when the agent died, its exit
// status and stderr tail; otherwise the protocol error with its data.
func (b *Backend) turnError(err error) error {
	disconnected := false
	select {
	case <-b.outputDone:
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
	if errors.As(err, &re) && re.Code == codeAuthRequired {
		b.mu.Lock()
		none := len(b.info.Auth) == 0
		b.mu.Unlock()
		return fmt.Errorf("turn failed: %w", &backends.AuthRequiredError{Refusal: refusal(err), NoMethod: none})
	}
	if errors.As(err, &re) {
		return fmt.Errorf("turn failed: agent error %d %s: %w", re.Code, re.Message, err)
	}
	return fmt.Errorf("turn failed: %w", err)
}

// sendCancel sends session/cancel and answers pending permission requests
// "cancelled".
func (b *Backend) sendCancel(sid string) {
	// The notification first, so the agent knows why its pending
	// permission requests are answered "cancelled".
	raw, err := json.Marshal(struct {
		JSONRPC string                    `json:"jsonrpc"`
		Method  string                    `json:"method"`
		Params  acpsdk.CancelNotification `json:"params"`
	}{"2.0", "session/cancel", acpsdk.CancelNotification{SessionId: acpsdk.SessionId(sid)}})
	if err == nil {
		_, err = b.out.Write(append(raw, '\n'))
	}
	if err != nil {
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
	return backends.AwaitCancel(ctx, t.cancelReq, t.ended)
}

// SetMode switches the session mode (session/set_mode).
func (b *Backend) SetMode(ctx context.Context, modeID string) error {
	b.mu.Lock()
	sid := b.sessionID
	b.mu.Unlock()
	if sid == "" {
		return backends.ErrNotStarted
	}
	conn, release, err := b.acquire()
	if err != nil {
		return fmt.Errorf("set mode %q: %w", modeID, err)
	}
	defer release()
	if _, err := conn.SetSessionMode(ctx, acpsdk.SetSessionModeRequest{SessionId: acpsdk.SessionId(sid), ModeId: acpsdk.SessionModeId(modeID)}); err != nil {
		return stageErr(ctx, "set mode "+strconv.Quote(modeID), err)
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
	conn, release, err := b.acquire()
	if err != nil {
		return fmt.Errorf("set config option %q: %w", id, err)
	}
	defer release()
	resp, err := conn.SetSessionConfigOption(ctx, b.configRequest(sid, id, value))
	if err != nil {
		return stageErr(ctx, "set config option "+strconv.Quote(id), err)
	}
	if len(resp.ConfigOptions) > 0 {
		raw, _ := json.Marshal(resp.ConfigOptions)
		b.mu.Lock()
		b.info.ConfigOptions = raw
		b.mu.Unlock()
	}
	return nil
}

// configRequest is the session/set_config_option request that sets option
// id to value: a boolean for an option the agent announced as boolean
// (value "true" or "false"), a value id otherwise.
func (b *Backend) configRequest(sid, id, value string) acpsdk.SetSessionConfigOptionRequest {
	b.mu.Lock()
	opts, _ := backends.ParseConfigOptions(b.info.ConfigOptions)
	b.mu.Unlock()
	for _, o := range opts {
		if o.ID == id && o.Type == backends.OptionBoolean && (value == "true" || value == "false") {
			return acpsdk.SetSessionConfigOptionRequest{Boolean: &acpsdk.SetSessionConfigOptionBoolean{
				SessionId: acpsdk.SessionId(sid), ConfigId: acpsdk.SessionConfigId(id), Type: backends.OptionBoolean, Value: value == "true",
			}}
		}
	}
	return acpsdk.SetSessionConfigOptionRequest{ValueId: &acpsdk.SetSessionConfigOptionValueId{
		SessionId: acpsdk.SessionId(sid), ConfigId: acpsdk.SessionConfigId(id), Value: acpsdk.SessionConfigValueId(value),
	}}
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
