package acp

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// EventUnknownUpdate carries a session/update of a kind this client does not
// know, raw, so nothing the agent says is lost.
const EventUnknownUpdate backends.EventType = "update.unknown"

// update is the part of a session/update payload the filter needs.
type update struct {
	Kind          string          `json:"sessionUpdate"`
	Content       json.RawMessage `json:"content"`
	ToolCallID    string          `json:"toolCallId"`
	ToolKind      string          `json:"kind"`
	CurrentModeID string          `json:"currentModeId"`
	Commands      json.RawMessage `json:"availableCommands"`
	ConfigOptions json.RawMessage `json:"configOptions"`
	MessageID     string          `json:"messageId"`
}

// textContent is a content block whose text is kept as the JSON string the
// agent sent: a chunk's text goes into its event without being decoded and
// encoded again (a 1 MiB chunk would cost two more passes and copies).
type textContent struct {
	Type string          `json:"type"`
	Text json.RawMessage `json:"text"`
}

// chunkData returns the Data of a message chunk event, a
// backends.ChunkData: the text of a text block (spliced as the agent's
// JSON string, which its line's decoding has validated), or the raw block
// as Content when it is anything else.
func chunkData(role, messageID string, content json.RawMessage) json.RawMessage {
	var tc textContent
	if !decodeText(content, &tc) { // fastline.go
		tc = textContent{}
		if json.Unmarshal(content, &tc) != nil {
			tc = textContent{}
		}
	}
	return chunkDataWith(role, messageID, content, tc)
}

// chunkDataWith is chunkData once content is decoded into tc (zero when
// it is not a JSON object of textContent's shape).
func chunkDataWith(role, messageID string, content json.RawMessage, tc textContent) json.RawMessage {
	if tc.Type != "text" ||
		len(tc.Text) > 0 && tc.Text[0] != '"' && string(tc.Text) != "null" {
		return backends.MustJSON(backends.ChunkData{Role: role, Content: content, MessageID: messageID})
	}
	if t := string(tc.Text); t == "" || t == `""` || t == "null" { // no text
		return backends.MustJSON(backends.ChunkData{Role: role, MessageID: messageID})
	}
	head := backends.MustJSON(backends.ChunkData{Role: role})
	// The fields in ChunkData's order: role, text, message_id.
	out := make([]byte, 0, len(head)+len(tc.Text)+len(messageID)+32)
	out = append(out, head[:len(head)-1]...)
	out = append(out, `,"text":`...)
	out = append(out, tc.Text...)
	if messageID != "" {
		out = append(out, `,"message_id":`...)
		out = append(out, backends.MustJSON(messageID)...)
	}
	return append(out, '}')
}

// handleUpdate queues the session/update whose params are raw: the path of
// updates whose line the filter could not decode in one pass, and of the SDK.
func (b *Backend) handleUpdate(params json.RawMessage) error {
	var n struct {
		SessionID string          `json:"sessionId"`
		Update    json.RawMessage `json:"update"`
	}
	if err := json.Unmarshal(params, &n); err != nil {
		return fmt.Errorf("%w: session/update params: %v", ErrProtocol, err)
	}
	var u update
	if err := json.Unmarshal(n.Update, &u); err != nil {
		return fmt.Errorf("%w: session/update: %v", ErrProtocol, err)
	}
	return b.queueUpdate(n.SessionID, u, func() json.RawMessage { return n.Update })
}

// queueUpdate turns one decoded session/update into an Event and queues it.
// raw returns the update verbatim; only the kinds kept verbatim call it. It
// runs on the filter goroutine and never blocks on delivery.
func (b *Backend) queueUpdate(sessionID string, u update, raw func() json.RawMessage) error {
	var verbatim json.RawMessage
	if chunkRole(u.Kind) == "" {
		verbatim = raw()
	}
	b.mu.Lock()
	sid, replaying := b.sessionID, b.replaying
	if sid != "" && sessionID != sid {
		b.mu.Unlock()
		b.logger.Warn("update for another session dropped", "session_id", sessionID)
		return nil
	}
	if replaying {
		b.replayLast = time.Now() // the replay is not quiet yet (replay.go)
	}
	ev := b.eventForLocked(u, verbatim, replaying)
	b.mu.Unlock()
	// An update of the replay window is never a turn's, even if the first
	// prompt's turn is already waiting for the replay to go quiet.
	b.queue.push(ev, replaying)
	return nil
}

// chunkRole is the ChunkData role of a chunk kind, "" for other kinds.
func chunkRole(kind string) string {
	switch kind {
	case "agent_message_chunk":
		return backends.RoleAgent
	case "agent_thought_chunk":
		return backends.RoleThought
	case "user_message_chunk":
		// The agent's words about what the user said, not the user's.
		return backends.RoleUserEcho
	}
	return ""
}

// eventForLocked maps an update to an Event and applies state updates to
// Info. During the replay window of a session/load (replay.go) the
// conversation (chunks, tool calls, plans, unknown kinds) comes out as
// EventHistory, and its tool calls are not remembered for permission
// requests: they are old. State updates (commands, mode, config, session
// info, usage) describe the session as it is now and keep their own types.
func (b *Backend) eventForLocked(u update, raw json.RawMessage, replaying bool) backends.Event {
	t, data, state := b.mapUpdateLocked(u, raw, replaying)
	if replaying && !state {
		data = backends.MustJSON(backends.HistoryData{Type: t, Data: data})
		t = backends.EventHistory
	}
	return backends.Event{Time: time.Now(), Type: t, Agent: b.cfg.Spec.Provider, Data: data}
}

// mapUpdateLocked returns the event type and payload of an update as live
// output, and whether the update is session state rather than conversation.
func (b *Backend) mapUpdateLocked(u update, raw json.RawMessage, replaying bool) (t backends.EventType, data json.RawMessage, state bool) {
	switch u.Kind {
	case "agent_message_chunk", "agent_thought_chunk", "user_message_chunk":
		return backends.EventMessageChunk, chunkData(chunkRole(u.Kind), u.MessageID, u.Content), false
	case "tool_call", "tool_call_update":
		t := backends.EventToolCall
		// A repeated tool_call for an id of this turn is an update
		// (ACP-NOTES item 4); one of an earlier turn is a new call.
		if u.Kind == "tool_call_update" || b.toolCalls.known(u.ToolCallID) {
			t = backends.EventToolUpdate
		}
		if !replaying {
			b.toolCalls.note(u.ToolCallID, u.ToolKind)
		}
		return t, raw, false
	case "plan":
		return backends.EventPlan, raw, false
	case "available_commands_update":
		b.info.Commands = append(json.RawMessage(nil), u.Commands...)
		return backends.EventCommands, raw, true
	case "current_mode_update":
		b.info.CurrentMode = u.CurrentModeID
		return backends.EventMode, raw, true
	case "config_option_update":
		b.info.ConfigOptions = append(json.RawMessage(nil), u.ConfigOptions...)
		return backends.EventConfig, raw, true
	case "session_info_update":
		return backends.EventSessionInfo, raw, true
	case "usage_update":
		return backends.EventUsage, raw, true
	default:
		// An unknown (future) kind is kept raw, never decoded as a known
		// one; in a replay it may be old conversation, so it is history.
		return EventUnknownUpdate, raw, false
	}
}

// eventQueue is a bounded FIFO between the filter and the delivery
// goroutine, with counters for the end-of-turn barrier.
type eventQueue struct {
	mu        sync.Mutex
	cond      *sync.Cond
	items     []queued
	closed    bool
	pushed    uint64
	delivered uint64
	// bytes is the Data of the events pushed and not yet freed by
	// delivery (see free); peak the most it has been.
	bytes, peak int64
}

func (q *eventQueue) init() { q.cond = sync.NewCond(&q.mu) }

// queued is an event with its position in the queue, from 1. outside
// marks an update of a session/load replay window: it goes to OnEvent even
// while a turn is set.
type queued struct {
	pos     uint64
	ev      backends.Event
	outside bool
}

// push appends ev (outside: see queued), first waiting while
// maxQueuedEvents are queued or maxQueuedBytes are queued or being
// delivered (unless the queue is closed). Only the filter goroutine
// pushes, and delivery never waits for the filter, so the wait always ends.
func (q *eventQueue) push(ev backends.Event, outside bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for (len(q.items) >= maxQueuedEvents || q.bytes >= maxQueuedBytes) && !q.closed {
		q.cond.Wait()
	}
	q.bytes += int64(cap(ev.Data))
	q.peak = max(q.peak, q.bytes)
	q.pushed++
	q.items = append(q.items, queued{q.pushed, ev, outside})
	q.cond.Broadcast()
}

// pushedCount is the number of events ever pushed.
func (q *eventQueue) pushedCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pushed
}

// take waits for events and returns them all; ok is false once closed and empty.
func (q *eventQueue) take() ([]queued, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return nil, false
	}
	out := q.items
	q.items = nil
	q.cond.Broadcast() // a filter waiting for room
	return out, true
}

// free gives back the bytes of an event delivery is done with.
func (q *eventQueue) free(n int) {
	if n == 0 {
		return
	}
	q.mu.Lock()
	q.bytes -= int64(n)
	q.cond.Broadcast()
	q.mu.Unlock()
}

func (q *eventQueue) markDelivered(n int) {
	q.mu.Lock()
	q.delivered += uint64(n)
	q.cond.Broadcast()
	q.mu.Unlock()
}

// waitDelivered waits until target events have been delivered or the queue closed.
func (q *eventQueue) waitDelivered(target uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.delivered < target && !q.closed {
		q.cond.Wait()
	}
}

func (q *eventQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// deliver runs on its own goroutine: it hands queued events to the running
// turn's emit, or to OnEvent outside a turn, in arrival order.
func (b *Backend) deliver() {
	defer b.wg.Done()
	for {
		evs, ok := b.queue.take()
		if !ok {
			return
		}
		for i, it := range evs {
			evs[i] = queued{} // delivered, it is not the queue's to keep
			ev := it.ev
			b.mu.Lock()
			t := b.turn
			switch {
			case it.outside:
				t = nil // a session/load replay (replay.go)
			case t != nil && b.promptMarked && it.pos > b.promptMark:
				t = nil // arrived after the turn's answer
			}
			b.mu.Unlock()
			if t != nil {
				ev.Turn = t.id
				t.emit(ev)
			} else {
				b.cfg.OnEvent(ev)
			}
			b.queue.free(cap(ev.Data))
		}
		b.queue.markDelivered(len(evs))
	}
}
