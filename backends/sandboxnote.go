package backends

import "strings"

// Sandbox entries a SandboxNote names: the provider settings that grant
// paths.
const (
	// EntryRead is a provider's "sandbox.read" list.
	EntryRead = "sandbox.read"
	// EntryWrite is a provider's "sandbox.write" list.
	EntryWrite = "sandbox.write"
	// EntryEnv is a variable of the agent's environment that names a path
	// (see EnvPaths); the note's Reason names it.
	EntryEnv = "env"
)

// SandboxNote explains one way the sandbox keeps an agent from a path: a
// grant the daemon refused, or a path the agent was denied when it
// started. It is what the provider's status, the session's events and a
// failed start show the user.
type SandboxNote struct {
	// Path is the path concerned, absolute.
	Path string `json:"path"`
	// Entry is EntryRead or EntryWrite: the entry that was refused, or
	// the one to add Grant to; EntryEnv for a path a variable of the
	// agent's environment names; "" for a path of the command line.
	Entry string `json:"entry,omitempty"`
	// Reason says why: "contains the daemon's home /x", "is your home
	// directory", "the agent could not read it", ...
	Reason string `json:"reason"`
	// Grant is the path to add to Entry ("~/" for the home), when adding
	// one helps.
	Grant string `json:"grant,omitempty"`
	// Fix says what to do, in a sentence.
	Fix string `json:"fix,omitempty"`
}

// String is the note in one line: "PATH: REASON; FIX".
func (n SandboxNote) String() string {
	var b strings.Builder
	b.WriteString(n.Path)
	if n.Entry != "" && n.Grant == "" {
		b.WriteString(" (" + n.Entry + ")")
	}
	b.WriteString(": " + n.Reason)
	if n.Fix != "" {
		b.WriteString("; " + n.Fix)
	}
	return b.String()
}

// EventSandboxRefused is the session event of a launch whose sandbox
// refused grants the provider asked for, or whose agent was denied a path
// it needed to start; its data is a SandboxEventData.
const EventSandboxRefused EventType = "sandbox.refused"

// SandboxEventData is the data of an EventSandboxRefused event.
type SandboxEventData struct {
	// Refused are the grants the daemon refused for this launch.
	Refused []SandboxNote `json:"refused,omitempty"`
	// Denied are the paths the agent was denied when its start failed,
	// each with the entry that would allow it.
	Denied []SandboxNote `json:"denied,omitempty"`
}
