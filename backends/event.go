package backends

import (
	"encoding/json"
	"time"
)

// EventType names what an Event reports. The set is transport-neutral so that
// ACP and PTY sessions read the same way through the API.
type EventType string

// Event types.
const (
	EventSessionCreated EventType = "session.created"
	EventSessionClosed  EventType = "session.closed"
	// EventSessionMoved: the session went to another host of the pool
	// (moved, drained, or taken over from a host that died).
	EventSessionMoved       EventType = "session.moved"
	EventAgentStarting      EventType = "agent.starting"
	EventAgentReady         EventType = "agent.ready"
	EventAgentExited        EventType = "agent.exited"
	EventAgentContextLost   EventType = "agent.context_lost"
	EventTurnStarted        EventType = "turn.started"
	EventTurnEnded          EventType = "turn.ended"
	EventMessageChunk       EventType = "message.chunk"
	EventToolCall           EventType = "tool.call"
	EventToolUpdate         EventType = "tool.update"
	EventPlan               EventType = "plan"
	EventCommands           EventType = "commands"
	EventMode               EventType = "mode"
	EventConfig             EventType = "config"
	EventSessionInfo        EventType = "session.info"
	EventUsage              EventType = "usage"
	EventPermissionRequest  EventType = "permission.requested"
	EventPermissionResolved EventType = "permission.resolved"
	EventFSRead             EventType = "fs.read"
	EventFSWrite            EventType = "fs.write"
	EventTerminalCreated    EventType = "terminal.created"
	EventTerminalExited     EventType = "terminal.exited"
	EventPTYOutput          EventType = "pty.output"
	EventPTYScreen          EventType = "pty.screen"
	EventError              EventType = "error"
	// EventMCP says which MCP servers an ACP agent was given when its
	// session started (by name only, never a secret value), and which it
	// could not take. Its Data is an MCPData.
	EventMCP EventType = "mcp"
	// EventHistory is an update an agent replayed from an earlier
	// conversation when the session was loaded: old output, never part of
	// a turn. Its Data is a HistoryData.
	EventHistory EventType = "history"
)

// Event is one thing that happened in a session. Backends fill Type, Time,
// Agent and Data; the pool assigns Seq, Session and Turn.
type Event struct {
	// Seq is the event's position in its session's log, from 1.
	Seq int64 `json:"seq"`
	// Session is the agentpool session id.
	Session string `json:"session"`
	// Agent is the provider id that produced the event, if any.
	Agent string `json:"agent,omitempty"`
	// Turn is the number, within Session, of the turn the event belongs
	// to (1 for a session's first turn), 0 outside a turn.
	Turn int64 `json:"turn,omitempty"`
	// Time is when the event was produced.
	Time time.Time `json:"time"`
	// Type says what happened.
	Type EventType `json:"type"`
	// Data is the type-specific payload, a JSON object.
	Data json.RawMessage `json:"data,omitempty"`
}

// NewEvent returns an Event of type t stamped now, with data marshalled to
// JSON. A value that cannot be marshalled becomes {"marshal_error": "..."}
// rather than being lost.
func NewEvent(t EventType, agent string, data any) Event {
	return Event{Time: time.Now(), Type: t, Agent: agent, Data: MustJSON(data)}
}

// MustJSON marshals v, turning a marshalling failure into a JSON object that
// names the failure, so an event is never dropped for its payload.
func MustJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	if raw, ok := v.(json.RawMessage); ok {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"marshal_error": err.Error()})
	}
	return b
}

// ChunkData is the payload of EventMessageChunk.
type ChunkData struct {
	// Role is "agent", "thought" or "user_echo" ("user" in events stored
	// before user_echo existed).
	Role string `json:"role"`
	// Text is the text of the chunk; other content is kept in Content.
	Text string `json:"text,omitempty"`
	// Content is the raw ACP content block when it is not plain text.
	Content json.RawMessage `json:"content,omitempty"`
	// MessageID is the id of the message the chunk belongs to, when the
	// agent gives one: chunks of one message share it, and a new id
	// starts a new message.
	MessageID string `json:"message_id,omitempty"`
}

// Chunk roles.
const (
	// RoleAgent is the agent's message text.
	RoleAgent = "agent"
	// RoleThought is the agent's reasoning text.
	RoleThought = "thought"
	// RoleUserEcho is an ACP user_message_chunk: the agent's own account
	// of a user message (an echo of the prompt, or history it replays).
	// It is the agent's words, whatever they claim, and is never shown as
	// the user's: what the user said is the turn's prompt, which the
	// daemon records itself.
	RoleUserEcho = "user_echo"
	// RoleUser is what RoleUserEcho was stored as by earlier versions;
	// readers treat both alike.
	RoleUser = "user"
)

// IsUserEcho reports whether a chunk role is an agent's echo of a user
// message (RoleUserEcho, or RoleUser of earlier versions).
func IsUserEcho(role string) bool { return role == RoleUserEcho || role == RoleUser }

// HistoryData is the payload of EventHistory: the event the replayed update
// would have been had it been live. History is a type of its own rather than
// a flag on Event so that it survives the store (which keeps type and data)
// and so that a reader that does not know it never shows old output as new.
type HistoryData struct {
	// Type is the type of the event replayed (message.chunk, tool.call,
	// tool.update, plan, update.unknown).
	Type EventType `json:"type"`
	// Data is that event's payload.
	Data json.RawMessage `json:"data,omitempty"`
}

// ExitData is the payload of EventAgentExited.
type ExitData struct {
	PID        int    `json:"pid"`
	Status     string `json:"status"`
	Expected   bool   `json:"expected"`
	StderrTail string `json:"stderr_tail,omitempty"`
}
