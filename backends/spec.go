package backends

import (
	"fmt"
	"path/filepath"
	"time"
)

// Kind names the transport a provider speaks.
type Kind string

// The transports agentpool drives.
const (
	// KindACP is an Agent Client Protocol agent over stdio.
	KindACP Kind = "acp"
	// KindPTY is a terminal program driven through a pseudo-terminal.
	KindPTY Kind = "pty"
)

// Defaults applied by backends when a Spec leaves a field zero.
const (
	DefaultTurnTimeout  = 30 * time.Minute
	DefaultStartTimeout = 60 * time.Second
	DefaultIdleTimeout  = 15 * time.Minute
	DefaultCols         = 120
	DefaultRows         = 40
	DefaultQuietWindow  = time.Second
)

// Compat holds per-provider switches for known agent quirks.
type Compat struct {
	// MissingFileEmpty answers a read of a missing file with empty content
	// instead of the spec's -32002 "resource not found" (ACP-NOTES item 6).
	MissingFileEmpty bool `json:"missing_file_empty,omitempty"`
	// NoCancelRequest never sends the agent $/cancel_request (the JSON-RPC
	// notification that a request to it was abandoned): it does not take
	// it, and says so on its stderr (ACP-NOTES item 18).
	NoCancelRequest bool `json:"no_cancel_request,omitempty"`
}

// PTYSpec holds the settings of a terminal-driven provider.
type PTYSpec struct {
	// ReadyPattern is a regular expression over the rendered screen that
	// matches when the program waits for input. Empty means: use QuietWindow.
	ReadyPattern string `json:"ready_pattern,omitempty"`
	// BusyPattern is a regular expression over the rendered screen that
	// matches while the program works (claude: "esc to interrupt"), for
	// programs that keep their prompt on the screen while they work.
	BusyPattern string `json:"busy_pattern,omitempty"`
	// QuietWindow is how long output must stay quiet to count as ready when
	// there is no ReadyPattern.
	QuietWindow time.Duration `json:"quiet_window,omitempty"`
	// Cols and Rows size the terminal.
	Cols int `json:"cols,omitempty"`
	Rows int `json:"rows,omitempty"`
	// CancelKeys is sent to cancel a turn (default Ctrl-C, "\x03").
	CancelKeys string `json:"cancel_keys,omitempty"`
	// ClearKeys empty the program's input line (claude: Ctrl-U, "\x15").
	// They are sent before each prompt, so that nothing left in the input
	// is joined to it, and after the cancel keys until the ready prompt
	// shows, so that a program that puts a cancelled prompt back into its
	// input (claude) comes back to an empty prompt: a successful cancel.
	ClearKeys string `json:"clear_keys,omitempty"`
	// CancelMinInterval is the least time between two sends of the cancel
	// keys, for programs that exit on a second Ctrl-C within a while
	// (aider: 2s). A cancel inside it waits for the rest of it.
	CancelMinInterval time.Duration `json:"cancel_min_interval,omitempty"`
	// IgnorePatterns are regular expressions over single screen rows. A
	// row of a turn's new text that matches one is the program's chrome
	// (status rows, logos, token counts, rule lines), not its answer, and
	// is left out of the turn's message.chunk.
	IgnorePatterns []string `json:"ignore_patterns,omitempty"`
	// ResumeArgs replace Args when a crashed program is restarted and the
	// CLI can continue its last conversation (e.g. claude --continue).
	ResumeArgs []string `json:"resume_args,omitempty"`
}

// Spec is everything needed to launch one agent process. The registry
// resolves it; the pool fills Dir with the session's worktree.
type Spec struct {
	// Provider is the registry id of the agent ("claude", "demo", ...).
	Provider string `json:"provider"`
	// Kind selects the backend.
	Kind Kind `json:"kind"`
	// Path is the absolute path of the executable; no shell is involved.
	Path string `json:"path"`
	// Args are the arguments after the program name.
	Args []string `json:"args,omitempty"`
	// Env lists the provider's own "KEY=value" variables, which the agent
	// gets on top of those of the daemon's environment that reach it
	// (see AgentEnv); proxy variables among them are dropped.
	Env []string `json:"env,omitempty"`
	// PassEnv names the variables of the daemon's environment the agent
	// gets besides BaseEnv's: names, or prefixes ending in "*"
	// ("AIDER_*"). The registry fills it from the provider's "pass_env"
	// (for a built-in, the variables its agent reads).
	PassEnv []string `json:"pass_env,omitempty"`
	// AuthEnv names the variables the agent said it reads its credentials
	// from (its env_var login methods, as its last probe saw them): it
	// gets them from the daemon's environment too, but for those
	// OwnerOnlyEnv keeps for the provider's owner to name.
	AuthEnv []string `json:"auth_env,omitempty"`
	// Dir is the working directory: the session's worktree. Absolute.
	Dir string `json:"dir,omitempty"`
	// TurnTimeout ends a turn that runs longer (0 = DefaultTurnTimeout).
	TurnTimeout time.Duration `json:"turn_timeout,omitempty"`
	// IdleTimeout stops a warm backend unused for this long (0 = the pool's default).
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// Permissions maps an action (see package permission) to allow|ask|deny.
	Permissions map[string]string `json:"permissions,omitempty"`
	// Mode "full" allows every action without asking.
	Mode string `json:"mode,omitempty"`
	// Config holds the provider's defaults for the session config
	// options the agent advertises ("model": "...", keyed by option id
	// or category) and, under "mode", its session mode; the pool applies
	// them when the agent starts, unless the session chose otherwise.
	Config map[string]string `json:"config,omitempty"`
	// Compat holds quirk switches.
	Compat Compat `json:"compat,omitempty"`
	// PTY holds the settings of KindPTY providers.
	PTY PTYSpec `json:"pty,omitempty"`
	// Sandbox is the provider's Landlock policy.
	Sandbox SandboxSpec `json:"sandbox"`
	// MCPServers are given to an ACP agent in session/new, session/load
	// and session/resume. Their Env and Headers values are secrets.
	MCPServers MCPServers `json:"mcp_servers,omitempty"`
	// Budget is the provider's limit over all its sessions. It does not
	// change how the agent is launched, so it is no part of the spec's
	// JSON (and a changed budget never restarts an agent).
	Budget Budget `json:"-"`
	// Handoff says whether the agent gets a briefing when it takes up a
	// session whose record its conversation lacks: "brief" or "" (an ACP
	// agent: yes; a PTY program: no), "off", or "type" (a PTY program
	// gets it typed ahead of the prompt). HandoffBytes bounds it (0: the
	// pool's default). Like Budget they change no launch.
	Handoff      string `json:"-"`
	HandoffBytes int    `json:"-"`
}

// Validate reports the first field of s that cannot be launched.
func (s Spec) Validate() error {
	switch {
	case s.Provider == "":
		return fmt.Errorf("spec: provider is empty")
	case s.Kind != KindACP && s.Kind != KindPTY:
		return fmt.Errorf("spec %q: unknown kind %q", s.Provider, s.Kind)
	case !filepath.IsAbs(s.Path):
		return fmt.Errorf("spec %q: path %q is not absolute", s.Provider, s.Path)
	case s.Dir != "" && !filepath.IsAbs(s.Dir):
		return fmt.Errorf("spec %q: dir %q is not absolute", s.Provider, s.Dir)
	}
	return nil
}

// TurnDeadline returns the turn timeout in force.
func (s Spec) TurnDeadline() time.Duration {
	if s.TurnTimeout > 0 {
		return s.TurnTimeout
	}
	return DefaultTurnTimeout
}

// Network modes of SandboxSpec.Network.
const (
	// NetworkAll leaves the network alone (the default).
	NetworkAll = "all"
	// NetworkNone refuses every TCP connect and bind (Landlock ABI >= 4).
	NetworkNone = "none"
	// NetworkList allows only what SandboxSpec.Ports and SandboxSpec.Hosts
	// name: a port on any public address, or a host entry.
	NetworkList = "list"
)

// SandboxSpec is a provider's filesystem and network confinement, applied
// with Landlock by the launcher that execs the agent (and every terminal
// the bridge starts for it). Paths are absolute once resolved by the
// registry, except that "$WORKTREE" (alone or as a prefix) stands for the
// session's worktree and is replaced at launch. The worktree, a private
// TMPDIR, the system directories and the agent's own installation are
// always granted; Read and Write add to them.
type SandboxSpec struct {
	// Enabled applies the Landlock rules. Cgroup containment applies
	// whatever its value.
	Enabled bool `json:"enabled"`
	// Read lists extra paths the agent may read and execute.
	Read []string `json:"read,omitempty"`
	// Write lists extra paths the agent may read, write and execute: the
	// provider's state directories and caches.
	Write []string `json:"write,omitempty"`
	// MakeDirs are directories of Write that the daemon makes (mode 0700,
	// with their parents) before a confined launch when they are missing:
	// a built-in's state directories, which an agent run for the first
	// time under the sandbox cannot make itself, the rest of the home
	// being absent or read-only in its view. One that Write does not list,
	// or that the sandbox refuses, is not made.
	MakeDirs []string `json:"make_dirs,omitempty"`
	// Sockets lists unix sockets (or directories of them) the agent may
	// connect to, shown in its view: in namespaces of its own it reaches
	// no other socket of the user's.
	Sockets []string `json:"sockets,omitempty"`
	// Network is NetworkAll, NetworkNone or NetworkList ("" = NetworkAll).
	Network string `json:"network,omitempty"`
	// Ports are the TCP ports the agent may connect to on any public
	// address with NetworkList.
	Ports []uint16 `json:"ports,omitempty"`
	// Hosts are the allow-list entries of NetworkList other than bare
	// ports, in the canonical form of egress.ParseHost: "api.example.com",
	// "*.example.com:443", "localhost:11434", "10.0.0.5:8080",
	// "10.0.0.0/8". Landlock filters ports only; the host entries are for
	// the egress proxy.
	Hosts []string `json:"hosts,omitempty"`
	// Required refuses to launch the agent when the kernel cannot apply
	// the rules, instead of running it unconfined.
	Required bool `json:"required,omitempty"`
}
