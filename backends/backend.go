package backends

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Backend is one running agent process, warm between turns.
//
// Start launches the process and completes the handshake; its ctx bounds the
// startup only, never the life of the process. Prompt runs one turn, calling
// emit for every event of the turn in arrival order, and returns when the
// agent says the turn is over; it is not safe to run two Prompts at once.
// Cancel asks the agent to end the running turn; the Prompt in flight then
// returns with StopCancelled. Stop ends the process (protocol close, SIGTERM
// to its group, SIGKILL to its group) and may be called any number of times.
// Done is closed once the process has exited and Err says why.
type Backend interface {
	Start(ctx context.Context, resume string) (Info, error)
	Prompt(ctx context.Context, p Prompt, emit func(Event)) (TurnResult, error)
	Cancel(ctx context.Context) error
	SetMode(ctx context.Context, modeID string) error
	SetConfigOption(ctx context.Context, id, value string) error
	Stop(ctx context.Context) error
	Done() <-chan struct{}
	Err() error
	Info() Info
}

// Errors shared by backends.
var (
	// ErrUnsupported is returned for an operation the agent or transport lacks.
	ErrUnsupported = errors.New("not supported by this agent")
	// ErrBusy is returned by Prompt while another turn runs on the backend.
	ErrBusy = errors.New("a turn is already running")
	// ErrExited is returned for calls made after the process ended.
	ErrExited = errors.New("agent process has exited")
	// ErrNotStarted is returned for calls made before Start succeeded.
	ErrNotStarted = errors.New("agent not started")
	// ErrAuthRequired means the agent needs the user to log in first (ACP
	// error -32000, "Authentication required"); Info.Auth lists the ways.
	ErrAuthRequired = errors.New("the agent needs you to log in")
)

// Ways an agent offers to log in, in AuthMethod.Type.
const (
	// AuthAgent: the client asks the agent to log in (ACP authenticate);
	// the agent does it its own way (a browser, a device code).
	AuthAgent = "agent"
	// AuthEnvVar: the agent reads credentials from environment variables.
	AuthEnvVar = "env_var"
	// AuthTerminal: the user logs in by running the agent's own program
	// with Args and Env in a terminal.
	AuthTerminal = "terminal"
)

// AuthMethod is one way an agent offers to log in (ACP authMethods).
type AuthMethod struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Type is AuthAgent, AuthEnvVar or AuthTerminal.
	Type string `json:"type"`
	// Vars are the environment variables of an AuthEnvVar method.
	Vars []string `json:"vars,omitempty"`
	// Link is where to get the credentials of an AuthEnvVar method.
	Link string `json:"link,omitempty"`
	// Args and Env are added to the agent's command for an AuthTerminal
	// method.
	Args []string          `json:"args,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
}

// StopReason says why a turn ended, with the ACP values.
type StopReason string

// Stop reasons.
const (
	StopEndTurn         StopReason = "end_turn"
	StopMaxTokens       StopReason = "max_tokens"
	StopMaxTurnRequests StopReason = "max_turn_requests"
	StopRefusal         StopReason = "refusal"
	StopCancelled       StopReason = "cancelled"
	// StopTimeout is agentpool's own: the turn deadline passed.
	StopTimeout StopReason = "timeout"
	// StopError is agentpool's own: the turn failed (crash, protocol error).
	StopError StopReason = "error"
)

// Prompt is one user turn.
type Prompt struct {
	// Text is the user's message.
	Text string `json:"text"`
	// Turn is the turn's number in its session, copied into events.
	Turn int64 `json:"turn,omitempty"`
	// Briefing, when set, is the pool's summary of what the agent missed
	// in its session, sent ahead of Text: as an embedded resource when
	// the agent takes them (Info.EmbeddedContext), else as text. Text
	// stays the user's words, unchanged.
	Briefing *Briefing `json:"briefing,omitempty"`
}

// Briefing is the pool's summary of a session for an agent taking it up
// (see Prompt.Briefing).
type Briefing struct {
	// URI names it, e.g. agentpool://session/S/briefing.
	URI string `json:"uri"`
	// Text is Markdown.
	Text string `json:"text"`
}

// BriefingMIMEType is the media type of a Briefing's Text.
const BriefingMIMEType = "text/markdown"

// Bounds of a briefing's size (Spec.HandoffBytes, a session's setting).
const (
	// DefaultBriefingBytes is the bound when none is set.
	DefaultBriefingBytes = 32 << 10
	// MinBriefingBytes is the least bound that may be set.
	MinBriefingBytes = 2 << 10
	// MaxBriefingBytes is the greatest.
	MaxBriefingBytes = 1 << 20
)

// TurnResult is how a turn ended.
type TurnResult struct {
	StopReason StopReason `json:"stop_reason"`
	// Duration is the wall time of the turn.
	Duration time.Duration `json:"duration"`
	// Usage is the agent's usage report, if any.
	Usage json.RawMessage `json:"usage,omitempty"`
	// UserMessageID is the id the agent gave the prompt's message
	// (userMessageId), when it gives one.
	UserMessageID string `json:"user_message_id,omitempty"`
}

// Mode is one session mode the agent offers.
type Mode struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// SessionCaps says which of the session methods beyond session/new and
// session/load an agent offers.
type SessionCaps struct {
	Resume bool `json:"resume,omitempty"`
	// Fork: the agent forks its sessions (ACP session/fork, unstable).
	Fork  bool `json:"fork,omitempty"`
	Close bool `json:"close,omitempty"`
	List  bool `json:"list,omitempty"`
}

// ForkStarter is a Backend that can start by forking one of its agent's
// sessions (ACP session/fork): StartFork is Start, but for an agent that
// offers session/fork its session is a fork of the agent session from
// (Info.ResumedBy "fork"); for one that does not, or refuses, it is a new
// session, as Start without a resume.
type ForkStarter interface {
	StartFork(ctx context.Context, from string) (Info, error)
}

// AgentSession is one of an agent's own sessions, as it lists them
// (ACP session/list).
type AgentSession struct {
	ID        string `json:"id"`
	Cwd       string `json:"cwd"`
	Title     string `json:"title,omitempty"`
	UpdatedAt string `json:"updated_at,omitempty"`
}

// SessionCloser is a Backend whose agent can end its own session (ACP
// session/close). The pool calls it only when the pooled session itself
// closes, never when an agent is evicted or idles out: those must stay
// resumable.
type SessionCloser interface {
	// CloseSession ends the agent's session. It returns an error wrapping
	// ErrUnsupported when the agent does not offer it.
	CloseSession(ctx context.Context) error
}

// Info describes a started backend.
type Info struct {
	Provider string `json:"provider"`
	Kind     Kind   `json:"kind"`
	PID      int    `json:"pid"`
	PGID     int    `json:"pgid"`
	// StartTicks is the process start time from /proc/<pid>/stat (clock
	// ticks since boot), used to recognise the same process after a restart.
	StartTicks uint64 `json:"start_ticks,omitempty"`
	// AgentSessionID is the agent's own session id, the resume token.
	AgentSessionID string `json:"agent_session_id,omitempty"`
	// Resumed is true when the agent took up the previous session again.
	Resumed bool `json:"resumed,omitempty"`
	// ResumedBy says how: "resume" (session/resume, no history replayed),
	// "load" (session/load, which replays the history) or "fork"
	// (session/fork of ForkedFrom: the conversation of another session
	// goes on in this one).
	ResumedBy string `json:"resumed_by,omitempty"`
	// ForkedFrom is the agent's session this one was forked from.
	ForkedFrom string `json:"forked_from,omitempty"`
	// Sessions is what the agent can do with its own sessions.
	Sessions SessionCaps `json:"sessions,omitzero"`
	// ContextLost is true when a resume was asked for but a new session started.
	ContextLost     bool   `json:"context_lost,omitempty"`
	AgentName       string `json:"agent_name,omitempty"`
	AgentVersion    string `json:"agent_version,omitempty"`
	ProtocolVersion int    `json:"protocol_version,omitempty"`
	LoadSession     bool   `json:"load_session,omitempty"`
	// EmbeddedContext: the agent takes embedded resources in a prompt
	// (ACP promptCapabilities.embeddedContext).
	EmbeddedContext bool     `json:"embedded_context,omitempty"`
	AuthMethods     []string `json:"auth_methods,omitempty"`
	// Auth describes each of AuthMethods.
	Auth          []AuthMethod    `json:"auth,omitempty"`
	Modes         []Mode          `json:"modes,omitempty"`
	CurrentMode   string          `json:"current_mode,omitempty"`
	ConfigOptions json.RawMessage `json:"config_options,omitempty"`
	Models        json.RawMessage `json:"models,omitempty"`
	Commands      json.RawMessage `json:"commands,omitempty"`
	// MCPServers are the names of the MCP servers the agent was given;
	// MCPSkipped those it could not take.
	MCPServers []string     `json:"mcp_servers,omitempty"`
	MCPSkipped []MCPSkipped `json:"mcp_skipped,omitempty"`
	StartedAt  time.Time    `json:"started_at"`
	// Confinement says how the agent is confined (cgroup, Landlock).
	Confinement Confinement `json:"confinement"`
}

// AwaitCancel is the common part of a Backend's Cancel: it posts a cancel
// request on req without blocking (req has room for one; a request still
// pending is enough) and waits until the turn has ended (ended is closed)
// or ctx ends.
func AwaitCancel(ctx context.Context, req chan<- struct{}, ended <-chan struct{}) error {
	select {
	case req <- struct{}{}:
	default:
	}
	select {
	case <-ended:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cancel turn: %w", ctx.Err())
	}
}
