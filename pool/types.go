package pool

import (
	"errors"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Errors returned by the pool. Each is wrapped with the details.
var (
	// ErrNotFound: no such session (or turn, or agent record).
	ErrNotFound = errors.New("not found")
	// ErrBusy: the session is running a turn.
	ErrBusy = errors.New("session is busy with a turn")
	// ErrAtCapacity: no backend could be evicted to make room.
	ErrAtCapacity = errors.New("pool at capacity")
	// ErrAgentFailing: the agent crashed too often for this session.
	ErrAgentFailing = errors.New("agent keeps crashing")
	// ErrClosed: the session (or the pool) is closed.
	ErrClosed = errors.New("closed")
	// ErrInvalid: a request is malformed (the message names the field).
	ErrInvalid = errors.New("invalid request")
	// ErrNoTurn: there is no turn to cancel, retry or restore.
	ErrNoTurn = errors.New("no such turn")
	// ErrSlowSubscriber: a subscription to the daemon-wide stream fell
	// further behind than the stream keeps events and was ended (session
	// subscriptions read the store instead).
	ErrSlowSubscriber = errors.New("subscriber fell behind and was dropped")
)

// userError is an error with the sentence a user should read (see
// UserMessage) in front of its cause, which Error and Unwrap keep.
type userError struct {
	msg string
	err error
}

func (e *userError) Error() string { return e.err.Error() }
func (e *userError) Unwrap() error { return e.err }

// UserMessage says what is wrong, and what to do, in a sentence.
func (e *userError) UserMessage() string { return e.msg }

// CreateRequest opens a session.
type CreateRequest struct {
	// ID is optional; a random id is made when empty.
	ID string `json:"id,omitempty"`
	// Repo is the path of the user's git repository.
	Repo string `json:"repo"`
	// BaseRef is the commit-ish the worktree starts from (default HEAD).
	BaseRef string `json:"base_ref,omitempty"`
	// Agent is the session's first (active) agent.
	Agent string `json:"agent"`
	// Title is free text.
	Title string `json:"title,omitempty"`
	// AgentSession, when set, is one of the agent's own sessions (see
	// `agentpool session list --from-agent`) for the session to take up:
	// the agent is asked to resume or load it, with the session's worktree
	// as its working directory. An agent that refuses (agents key their
	// history by directory) starts a new one, and agent.context_lost says
	// why.
	AgentSession string `json:"agent_session,omitempty"`
	// MCPServers are given to the session's ACP agents besides their
	// provider's, a server here replacing the provider's of its name. The
	// values of their env and headers are secrets: stored, never shown.
	MCPServers backends.MCPServers `json:"mcp_servers,omitempty"`
	// Handoff, when set, is the session's handoff setting (see
	// SetHandoff).
	Handoff *HandoffSetting `json:"handoff,omitempty"`
	// Budget, when set, is the session's own budget (see SetBudget).
	Budget *backends.Budget `json:"budget,omitempty"`
	// Warm starts the agent in the background as soon as the session
	// exists (after its worktree's setup), so that the first prompt finds
	// it ready; nil means true, false leaves the start to the first
	// prompt. See Pool.Create.
	Warm *bool `json:"warm,omitempty"`
}

// Session is a session with its live state.
type Session struct {
	ID          string        `json:"id"`
	Repo        string        `json:"repo"`
	BaseRef     string        `json:"base_ref,omitempty"`
	Title       string        `json:"title,omitempty"`
	ActiveAgent string        `json:"active_agent"`
	Status      string        `json:"status"`
	Worktree    Worktree      `json:"worktree"`
	CreatedAt   time.Time     `json:"created_at"`
	UpdatedAt   time.Time     `json:"updated_at"`
	Busy        bool          `json:"busy"`
	Turn        int64         `json:"turn,omitempty"`
	LastSeq     int64         `json:"last_seq"`
	Agents      []AgentStatus `json:"agents,omitempty"`
	// MCPServers are the session's own MCP servers, the values of their
	// env and headers replaced by backends.Redacted.
	MCPServers backends.MCPServers `json:"mcp_servers,omitempty"`
	// Usage is what the session used and its budget; only Get fills it.
	Usage *SessionUsage `json:"usage,omitempty"`
	// LastTurn is the number of the session's latest turn, running or
	// ended (Turn is the running one's only); 0 when it never had one.
	// Only Get fills it.
	LastTurn int64 `json:"last_turn,omitempty"`
	// PRURL is the pull request opened for the session's branch, as the
	// API recorded it (PUT /v1/sessions/{id}/pr); the pool leaves it
	// empty.
	PRURL string `json:"pr_url,omitempty"`
	// Host is the host that owns the session when several hosts share the
	// pool ("" for a daemon alone).
	Host string `json:"host,omitempty"`
}

// Backend states as shown in AgentStatus.
const (
	StateStarting = "starting"
	StateIdle     = "idle"
	StateBusy     = "busy"
	StateStopping = "stopping"
	StateCrashed  = "crashed"
	StateStopped  = "stopped"
)

// AgentStatus is one (session, agent) backend as the pool sees it.
type AgentStatus struct {
	Session        string        `json:"session"`
	Agent          string        `json:"agent"`
	Kind           backends.Kind `json:"kind"`
	State          string        `json:"state"`
	PID            int           `json:"pid,omitempty"`
	RSS            int64         `json:"rss_bytes,omitempty"`
	LastActive     time.Time     `json:"last_active"`
	IdleFor        time.Duration `json:"idle_for"`
	Restarts       int           `json:"restarts"`
	AgentSessionID string        `json:"agent_session_id,omitempty"`
	Mode           string        `json:"mode,omitempty"`
	Error          string        `json:"error,omitempty"`
	// MCPServers names the MCP servers the running agent was given (its
	// provider's and the session's).
	MCPServers []string `json:"mcp_servers,omitempty"`
	// Confinement says how the running agent is confined; nil when it
	// does not run.
	Confinement *backends.Confinement `json:"confinement,omitempty"`
	// Spare marks the agent of a spare session (see spares.go), which no
	// session has adopted yet.
	Spare bool `json:"spare,omitempty"`
}

// Turn is one prompt and how it ended. A turn is known as (Session, ID):
// ID is its number in the session, 1 for the first turn, and is what
// events carry as their turn.
type Turn struct {
	ID               int64      `json:"id"`
	Session          string     `json:"session"`
	Agent            string     `json:"agent"`
	Prompt           string     `json:"prompt"`
	StopReason       string     `json:"stop_reason,omitempty"`
	Error            string     `json:"error,omitempty"`
	CheckpointBefore string     `json:"checkpoint_before,omitempty"`
	CheckpointAfter  string     `json:"checkpoint_after,omitempty"`
	StartedAt        time.Time  `json:"started_at"`
	EndedAt          *time.Time `json:"ended_at,omitempty"`
	// QueuePosition is the turn's place in the queue for a backend slot
	// when it was accepted (1 is next); 0 when it got its backend at once.
	// It is not stored: only StartPrompt's answer carries it.
	QueuePosition int `json:"queue_position,omitempty"`
	// Usage is the turn's tokens, when its agent reported them.
	Usage *Tokens `json:"usage,omitempty"`
	// RequestKey is the key of the prompt that started the turn (see
	// PromptRequest.Key); only StartTurn reads it.
	RequestKey string `json:"-"`
	// Review is the review of the session's diff that this turn answers,
	// when its prompt was one (POST /v1/sessions/{id}/review); the API
	// fills it in, the pool leaves it nil.
	Review *Review `json:"review,omitempty"`
}

// PromptRequest runs one turn.
type PromptRequest struct {
	Session string `json:"-"`
	// Agent selects the agent; empty means the session's active agent.
	Agent string `json:"agent,omitempty"`
	Text  string `json:"text"`
	// Key, when set, is the key the client chose for this prompt (the
	// Idempotency-Key header): a prompt with the key of a turn the
	// session already has gets that turn instead of starting another, so
	// that a client may send it again when it does not know whether it
	// arrived.
	Key string `json:"-"`
}

// CloseResult says what closing a session did.
type CloseResult struct {
	Session  string       `json:"session"`
	Worktree RemoveResult `json:"worktree"`
}

// Stats are the pool's counters, for metrics.
type Stats struct {
	Warm       map[string]map[string]int `json:"warm"` // provider → state → count
	Sessions   int                       `json:"sessions"`
	Spawns     int64                     `json:"spawns"`
	Crashes    int64                     `json:"crashes"`
	Evictions  int64                     `json:"evictions"`
	Turns      int64                     `json:"turns"`
	TurnErrors int64                     `json:"turn_errors"`
	// BudgetCancels counts the turns a budget cancelled.
	BudgetCancels      int64         `json:"budget_cancels"`
	EventsPublished    int64         `json:"events_published"`
	SubscribersDrop    int64         `json:"subscribers_dropped"` // daemon-wide subscriptions ended for falling behind
	SubscriberCatchups int64         `json:"subscriber_catchups"` // store reads by session subscribers behind the ring
	PermissionWaits    int64         `json:"permission_waits"`
	Queued             int           `json:"queued"`         // prompts waiting for a backend slot now
	QueuedTotal        int64         `json:"queued_total"`   // prompts that have waited for a slot
	QueueMaxWait       time.Duration `json:"queue_max_wait"` // longest wait for a slot so far
	TurnDurations      Histogram     `json:"turn_durations"`
	PermissionWaitsS   Histogram     `json:"permission_wait_durations"`
}

// Histogram is a cumulative histogram in seconds.
type Histogram struct {
	Bounds []float64 `json:"bounds"` // upper bounds, seconds
	Counts []uint64  `json:"counts"` // cumulative counts per bound
	Count  uint64    `json:"count"`
	Sum    float64   `json:"sum"`
}
