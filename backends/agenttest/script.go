package agenttest

import "encoding/json"

// Script drives the scripted agent. The zero Script is a well-behaved agent
// that answers every prompt with one chunk echoing it.
type Script struct {
	// ProtocolVersion answered to initialize (default 1).
	ProtocolVersion int `json:"protocol_version,omitempty"`
	// AgentName is reported in agentInfo (default "fake-agent").
	AgentName string `json:"agent_name,omitempty"`
	// LoadSession advertises session/load.
	LoadSession bool `json:"load_session,omitempty"`
	// LoadFails makes session/load answer "Session not found".
	LoadFails bool `json:"load_fails,omitempty"`
	// ResumeSession advertises session/resume (sessionCapabilities.resume).
	ResumeSession bool `json:"resume_session,omitempty"`
	// ResumeFails makes session/resume answer "Session not found".
	ResumeFails bool `json:"resume_fails,omitempty"`
	// ForkSession advertises session/fork (sessionCapabilities.fork): a
	// fork answers a new session id, "fork-of-" the one forked.
	ForkSession bool `json:"fork_session,omitempty"`
	// ForkFails makes session/fork answer "Session not found".
	ForkFails bool `json:"fork_fails,omitempty"`
	// CloseSession advertises session/close.
	CloseSession bool `json:"close_session,omitempty"`
	// ListSessions advertises session/list, which answers Sessions (those
	// of the cwd asked for, when one is).
	ListSessions bool          `json:"list_sessions,omitempty"`
	Sessions     []SessionInfo `json:"sessions,omitempty"`
	// CallLog, when set, is a file to which the agent appends one line per
	// session request or notification it gets (and each $/cancel_request):
	// "METHOD SESSION-ID CWD", so a test can see
	// what reached the agent after it is gone.
	CallLog string `json:"call_log,omitempty"`
	// EmbeddedContext advertises embedded resources in prompts
	// (promptCapabilities.embeddedContext).
	EmbeddedContext bool `json:"embedded_context,omitempty"`
	// PromptLog, when set, is a file to which the agent appends, for
	// each session/prompt it gets, one line: the prompt's content blocks
	// as the client sent them (a JSON array), so a test can see exactly
	// what reached the agent. A leading "~/" is the agent's $HOME.
	PromptLog string `json:"prompt_log,omitempty"`
	// AuthMethods is answered raw as initialize's authMethods (default []).
	AuthMethods json.RawMessage `json:"auth_methods,omitempty"`
	// LoginFile, when set, makes the agent need a login: until the file
	// exists, session/new, session/load, session/resume and session/prompt
	// answer "Authentication required"; authenticate with a method of type
	// "agent" creates it (the agent keeping its own credentials).
	LoginFile string `json:"login_file,omitempty"`
	// LoginEnv, when set, makes the agent need a login, as LoginFile
	// does, until the variable it names is set in its environment (an
	// agent that reads its API key from there, whose env_var login
	// method names it).
	LoginEnv string `json:"login_env,omitempty"`
	// LoginMessage, when set, is the message of the "Authentication
	// required" answer (code -32000) instead of those words: an agent
	// that explains how to log in ("Authentication required: run `x
	// login` in your terminal").
	LoginMessage string `json:"login_message,omitempty"`
	// StateDir, when set, is a directory the agent makes (with its
	// parents) and writes a file in before it reads anything, as Node
	// agents make their state directory (~/.augment): when it cannot, it
	// writes Node's error line to stderr and exits with status 1. A
	// leading "~/" in StateDir, LoginFile and CallLog is the agent's
	// $HOME.
	StateDir string `json:"state_dir,omitempty"`
	// Modes offered by session/new, the first is current.
	Modes []Mode `json:"modes,omitempty"`
	// ConfigOptions returned by session/new (ACP configOptions, raw);
	// session/set_config_option changes their currentValue and answers
	// the whole set, refusing an unknown option or value.
	ConfigOptions json.RawMessage `json:"config_options,omitempty"`
	// Commands are announced in an available_commands_update once
	// session/new (or session/load) is answered.
	Commands []Command `json:"commands,omitempty"`
	// MCPHTTP and MCPSSE advertise MCP servers over http and sse in
	// agentCapabilities.mcpCapabilities (stdio is always taken).
	MCPHTTP bool `json:"mcp_http,omitempty"`
	MCPSSE  bool `json:"mcp_sse,omitempty"`
	// StringIDs makes the agent's own requests use string ids.
	StringIDs bool `json:"string_ids,omitempty"`
	// IDStart is the first integer id of the agent's requests (default 0).
	IDStart int `json:"id_start,omitempty"`
	// BeforeNewAnswer steps run after session/new arrives and before it is answered.
	BeforeNewAnswer []Step `json:"before_new_answer,omitempty"`
	// Replay steps run on session/load before it is answered, as the spec
	// has it.
	Replay []Step `json:"replay,omitempty"`
	// ReplayAfterAnswer steps run right after session/load is answered,
	// as gemini-cli 0.61 replays (one update, the answer, then the rest).
	// They stop when the client closes the agent's stdin, so a Chunks
	// step of a huge count paced by ChunksPerSecond is an agent that
	// replays forever.
	ReplayAfterAnswer []Step `json:"replay_after_answer,omitempty"`
	// ReplayDelayMs pauses this long before each step of Replay and
	// ReplayAfterAnswer.
	ReplayDelayMs int `json:"replay_delay_ms,omitempty"`
	// Turns: the n-th prompt runs Turns[n], the last one repeating.
	Turns []Turn `json:"turns,omitempty"`
	// ExitBeforeHandshake, when set, exits with this code before reading anything.
	ExitBeforeHandshake *int `json:"exit_before_handshake,omitempty"`
	// InitDelayMs delays the initialize answer.
	InitDelayMs int `json:"init_delay_ms,omitempty"`
	// HangOnInitialize never answers initialize.
	HangOnInitialize bool `json:"hang_on_initialize,omitempty"`
	// Unanswered lists request methods the agent never answers (after the
	// handshake), like an agent stuck in a call.
	Unanswered []string `json:"unanswered,omitempty"`
	// IgnoreSIGTERM ignores SIGTERM (and SIGHUP, SIGINT).
	IgnoreSIGTERM bool `json:"ignore_sigterm,omitempty"`
	// Grandchild spawns a child process in the agent's process group that
	// sleeps forever and ignores SIGTERM.
	Grandchild bool `json:"grandchild,omitempty"`
	// StderrFlood writes this many lines to stderr at start.
	StderrFlood int `json:"stderr_flood,omitempty"`
	// StopReadingAfterNew stops reading stdin once session/new is answered.
	StopReadingAfterNew bool `json:"stop_reading_after_new,omitempty"`
	// StartSteps run at start, before the agent reads its stdin (so before
	// initialize is answered) and before ExitBeforeHandshake: a Sys step here
	// plants a child with no prompt at all. There is no session yet, so
	// only steps that do not talk to the client belong here (Sys, Stderr,
	// SleepMs, Crash); Sys results go to stderr only.
	StartSteps []Step `json:"start_steps,omitempty"`
}

// SessionInfo is a session that session/list reports.
type SessionInfo struct {
	SessionID string `json:"sessionId"`
	Cwd       string `json:"cwd"`
	Title     string `json:"title,omitempty"`
	UpdatedAt string `json:"updatedAt,omitempty"`
}

// Mode is a session mode offered by the fake.
type Mode struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Turn is the scripted answer to one session/prompt.
type Turn struct {
	// Steps run in order; a cancel stops them unless IgnoreCancel.
	Steps []Step `json:"steps,omitempty"`
	// StopReason answered at the end (default end_turn).
	StopReason string `json:"stop_reason,omitempty"`
	// After steps run after the prompt has been answered.
	After []Step `json:"after,omitempty"`
	// IgnoreCancel keeps running (and never answers) after session/cancel.
	IgnoreCancel bool `json:"ignore_cancel,omitempty"`
	// UserMessageID, when set, is the userMessageId of the answer.
	UserMessageID string `json:"user_message_id,omitempty"`
	// Echo adds a chunk repeating the prompt text before the steps.
	Echo bool `json:"echo,omitempty"`
	// Usage, when set, is the usage of the answer, raw (ACP
	// PromptResponse.usage: {"inputTokens": 12, "outputTokens": 7, ...}).
	// A usage_update is an Update step.
	Usage json.RawMessage `json:"usage,omitempty"`
}

// Step is one scripted action. Exactly one field is set.
type Step struct {
	// Chunk is sent as agent text; "{{prompt}}" becomes the prompt (its
	// last text block: the user's words after any briefing),
	// "{{mode}}" the current mode and "{{config:ID}}" the current value
	// of config option ID.
	Chunk      string          `json:"chunk,omitempty"`
	Thought    string          `json:"thought,omitempty"`
	ToolCall   *ToolCall       `json:"tool_call,omitempty"`
	ToolUpdate *ToolCall       `json:"tool_update,omitempty"`
	Update     json.RawMessage `json:"update,omitempty"`
	// Permission asks session/request_permission; Allowed or Rejected run after.
	Permission *Permission `json:"permission,omitempty"`
	Read       *FileOp     `json:"read,omitempty"`
	Write      *FileOp     `json:"write,omitempty"`
	Terminal   *Terminal   `json:"terminal,omitempty"`
	// Request sends an arbitrary request and reports its answer as a chunk.
	Request *RawCall `json:"request,omitempty"`
	// Notify sends an arbitrary notification.
	Notify  *RawCall `json:"notify,omitempty"`
	SleepMs int      `json:"sleep_ms,omitempty"`
	// WaitCancel blocks until session/cancel arrives (or forever with IgnoreCancel).
	WaitCancel bool `json:"wait_cancel,omitempty"`
	// Crash writes Stderr and exits with this code.
	Crash *int `json:"crash,omitempty"`
	// CrashOnce crashes (exit 3) only if the marker file it names does not
	// exist yet, creating it: the first process crashes, a restarted one not.
	CrashOnce string `json:"crash_once,omitempty"`
	// Stderr writes a line to stderr.
	Stderr string `json:"stderr,omitempty"`
	// Garbage writes a raw line that is not JSON-RPC.
	Garbage string `json:"garbage,omitempty"`
	// BigLine writes one session/update line of about this many bytes;
	// with BigLines, that many of them, each written whole (the line is
	// made once: a flood of big updates costs the agent little CPU).
	BigLine  int `json:"big_line,omitempty"`
	BigLines int `json:"big_lines,omitempty"`
	// Chunks sends this many small agent_message_chunk updates.
	Chunks int `json:"chunks,omitempty"`
	// ChunksPerSecond paces Chunks at this rate (0: as fast as possible):
	// every millisecond or so, the chunks that are due are sent together.
	// Paced chunks stop at a session/cancel (or, in ReplayAfterAnswer,
	// when stdin ends).
	ChunksPerSecond int `json:"chunks_per_second,omitempty"`
	// Sys makes a system call of the agent's own (not through the client)
	// and reports the result as an agent_message_chunk in the format that
	// ParseSysResult reads.
	Sys *SysOp `json:"sys,omitempty"`
	// Parallel runs its steps at once (e.g. reads in flight together) and
	// waits for them all.
	Parallel []Step `json:"parallel,omitempty"`
	// MCPEcho sends, as an agent_message_chunk, the MCP servers the last
	// session/new, session/load or session/resume carried, secrets
	// digested (see ParseMCPEcho).
	MCPEcho bool `json:"mcp_echo,omitempty"`
	// MCPStart runs each stdio MCP server the last session/new or
	// session/load carried, as a real agent would (its child, in its
	// confinement), and reports each as a chunk (see ParseMCPStarted).
	MCPStart bool `json:"mcp_start,omitempty"`
	// MCPCall calls a tool of each MCP server the last session/new or
	// session/load carried, as a real agent would (see mcpcall.go).
	MCPCall *MCPCall `json:"mcp_call,omitempty"`
}

// ToolCall describes a tool_call or tool_call_update.
type ToolCall struct {
	ID        string          `json:"id"`
	Title     string          `json:"title,omitempty"`
	Kind      string          `json:"kind,omitempty"`
	Status    string          `json:"status,omitempty"`
	Locations []string        `json:"locations,omitempty"`
	RawInput  json.RawMessage `json:"raw_input,omitempty"`
	Text      string          `json:"text,omitempty"`
}

// Permission is a session/request_permission step.
type Permission struct {
	ToolCall ToolCall `json:"tool_call"`
	// Options default to allow_once/allow_always/reject_once with ids
	// "allow", "allow-always", "reject".
	Options  []Option `json:"options,omitempty"`
	Allowed  []Step   `json:"allowed,omitempty"`
	Rejected []Step   `json:"rejected,omitempty"`
}

// Option is a permission option.
type Option struct {
	ID   string `json:"optionId"`
	Name string `json:"name"`
	Kind string `json:"kind"`
}

// FileOp is an fs/read_text_file or fs/write_text_file step. A relative
// Path is joined to the session's cwd. In Content, "{{prompt}}" is replaced
// by the prompt text and "{{read}}" by the last content read.
type FileOp struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	Line    *int   `json:"line,omitempty"`
	Limit   *int   `json:"limit,omitempty"`
	// Echo sends what was read (or the error) as a chunk.
	Echo bool `json:"echo,omitempty"`
	// EchoLen sends the length of what was read, "read N bytes" (or the
	// error), as a chunk.
	EchoLen bool `json:"echo_len,omitempty"`
}

// Terminal is a terminal/create → wait_for_exit → output → release step.
type Terminal struct {
	Command         string   `json:"command"`
	Args            []string `json:"args,omitempty"`
	Cwd             string   `json:"cwd,omitempty"`
	OutputByteLimit *int     `json:"output_byte_limit,omitempty"`
	// Env are the variables the request adds to the terminal's
	// environment.
	Env map[string]string `json:"env,omitempty"`
	// NoRelease leaves the terminal to the client.
	NoRelease bool `json:"no_release,omitempty"`
	// NoWait reports the new terminal's id and leaves it running: no
	// wait_for_exit, output or release.
	NoWait bool `json:"no_wait,omitempty"`
}

// RawCall is an arbitrary method call.
type RawCall struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}
