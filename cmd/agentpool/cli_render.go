package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
)

// ANSI sequences used when stdout is a terminal.
const (
	ansiDim   = "\x1b[2m"
	ansiReset = "\x1b[0m"
	ansiRed   = "\x1b[31m"
	ansiGreen = "\x1b[32m"
	ansiCyan  = "\x1b[36m"
)

// eventData is the union of the payload fields the client shows.
type eventData struct {
	// message.chunk
	Role string `json:"role"`
	Text string `json:"text"`
	// tool.call and tool.update (ACP names)
	ToolCallID string `json:"toolCallId"`
	Title      string `json:"title"`
	Kind       string `json:"kind"`
	Status     string `json:"status"`
	Locations  []struct {
		Path string `json:"path"`
	} `json:"locations"`
	// plan
	Entries []struct {
		Content string `json:"content"`
		Status  string `json:"status"`
	} `json:"entries"`
	// mode
	CurrentModeID string `json:"currentModeId"`
	// permission.requested / resolved
	Request   string              `json:"request"`
	Risk      string              `json:"risk"`
	Action    string              `json:"action"`
	Decision  string              `json:"decision"`
	DecidedBy string              `json:"decided_by"`
	Options   []permission.Option `json:"options"`
	// agent.*, turn.*, error
	PID         int    `json:"pid"`
	Resumed     bool   `json:"resumed"`
	ContextLost bool   `json:"context_lost"`
	Reason      string `json:"reason"`
	Error       string `json:"error"`
	StderrTail  string `json:"stderr_tail"`
	Turn        int64  `json:"turn"`
	Prompt      string `json:"prompt"`
	StopReason  string `json:"stop_reason"`
	DurationMS  int64  `json:"duration_ms"`
	Changes     *struct {
		Files     int `json:"files"`
		Additions int `json:"additions"`
		Deletions int `json:"deletions"`
	} `json:"changes"`
	// Usage is the agent's own usage of the turn (ACP PromptResponse.usage).
	Usage *struct {
		Input  int64 `json:"inputTokens"`
		Output int64 `json:"outputTokens"`
		Total  int64 `json:"totalTokens"`
	} `json:"usage"`
	// Hidden: untracked paths that ignore rules the session changed hide.
	Hidden *struct {
		Count int               `json:"count"`
		Files []pool.HiddenFile `json:"files"`
	} `json:"hidden"`
	// History: what became of the agent's own commits (turn.ended).
	History *pool.HistoryImport `json:"history"`
	// fs.*, terminal.*, pty.output
	Path     string   `json:"path"`
	Outcome  string   `json:"outcome"` // fs.*: acpfs.Op's
	Command  string   `json:"command"`
	Args     []string `json:"args"`
	ExitCode *int     `json:"exit_code"`
	Data     string   `json:"data"`
}

func decodeData(ev backends.Event) eventData {
	var d eventData
	_ = json.Unmarshal(ev.Data, &d) // a payload of another shape shows less, never fails
	return d
}

// renderer prints a turn readably: agent text as it streams, thoughts
// dimmed (or marked when not on a terminal), tool calls and permissions as
// one-line summaries; agent life-cycle notes go to the progress writer.
type renderer struct {
	out, note io.Writer
	color     bool
	role      string // the chunk role being written, "" after a line of another kind
	midLine   bool   // the last text written did not end a line
	tools     map[string]string
	// said are the lines of notes shown since the turn began (an agent's
	// stderr, a sandbox note, an error): an error that repeats them (a
	// failed start carries its stderr and its sandbox notes) shows only
	// what is new.
	said map[string]bool
}

func newRenderer(out, note io.Writer, color bool) *renderer {
	return &renderer{out: out, note: note, color: color, tools: map[string]string{}}
}

// endText ends a run of chunks: the dim colour and the line.
func (r *renderer) endText() {
	if r.role == backends.RoleThought && r.color {
		io.WriteString(r.out, ansiReset)
	}
	if r.midLine {
		io.WriteString(r.out, "\n")
	}
	r.role, r.midLine = "", false
}

// line prints one summary line, after ending any text in progress.
func (r *renderer) line(w io.Writer, colour, format string, args ...any) {
	r.endText()
	// The arguments are the agent's words: escaped, so that only the
	// colour added here reaches the terminal as a sequence.
	s := termText(fmt.Sprintf(format, args...))
	if r.color && colour != "" {
		s = colour + s + ansiReset
	}
	fmt.Fprintln(w, s)
}

// chunk writes streamed text of role.
func (r *renderer) chunk(role, text string) {
	// An agent's echo of a user message is not shown live: what the user
	// said is the turn's prompt, and the echo is the agent's words.
	if backends.IsUserEcho(role) || text == "" {
		return
	}
	if role != r.role {
		r.endText()
		r.role = role
		if role == backends.RoleThought {
			if r.color {
				io.WriteString(r.out, ansiDim)
			} else {
				io.WriteString(r.out, "(thinking) ")
			}
		}
	}
	io.WriteString(r.out, termText(text))
	r.midLine = !strings.HasSuffix(text, "\n")
}

// event renders one event of the turn.
func (r *renderer) event(ev backends.Event) {
	d := decodeData(ev)
	switch ev.Type {
	case backends.EventMessageChunk:
		r.chunk(d.Role, d.Text)
	case backends.EventToolCall:
		r.tools[d.ToolCallID] = d.Title
		r.line(r.out, ansiCyan, "→ %s", toolSummary(d))
	case backends.EventToolUpdate:
		title := r.tools[d.ToolCallID]
		if d.Title != "" {
			title = d.Title
			r.tools[d.ToolCallID] = title
		}
		if title == "" {
			// Its tool.call came before this stream (events --follow
			// started mid-turn), or the agent never titled it.
			title = d.ToolCallID
		}
		switch d.Status {
		case "completed":
			r.line(r.out, ansiGreen, "  ✓ %s", title)
		case "failed":
			r.line(r.out, ansiRed, "  ✗ %s failed", title)
		}
	case backends.EventPlan:
		r.line(r.out, "", "plan:")
		for _, e := range d.Entries {
			mark := map[string]string{"completed": "[x]", "in_progress": "[~]"}[e.Status]
			if mark == "" {
				mark = "[ ]"
			}
			r.line(r.out, "", "  %s %s", mark, e.Content)
		}
	case backends.EventPermissionRequest:
		r.line(r.out, ansiCyan, "? permission asked: %s", permissionSummary(d))
	case backends.EventPermissionResolved:
		r.line(r.out, "", "  permission %s (%s)", d.Decision, d.DecidedBy)
	case backends.EventTerminalCreated:
		r.line(r.out, "", "$ %s", strings.TrimSpace(d.Command+" "+strings.Join(d.Args, " ")))
	case backends.EventFSRead, backends.EventFSWrite:
		r.fsAccess(ev.Type, d)
	case backends.EventPTYOutput:
		r.chunk(backends.RoleAgent, d.Data)
	case backends.EventError:
		if msg := r.fresh(d.Error); msg != "" {
			r.line(r.note, ansiRed, "error: %s", msg)
		}
	case backends.EventAgentStarting:
		r.line(r.note, "", "starting agent %s…", ev.Agent)
	case backends.EventAgentReady:
		note := ""
		if d.Resumed {
			note = ", resumed its conversation"
		}
		r.line(r.note, "", "agent %s ready (pid %d%s)", ev.Agent, d.PID, note)
	case pool.EventTurnBriefing:
		r.line(r.note, "", "note: %s", briefingLine(ev))
	case backends.EventAgentContextLost:
		r.line(r.note, "", "note: agent %s could not resume its conversation and starts a new one", ev.Agent)
	case backends.EventAgentExited:
		r.line(r.note, ansiRed, "agent %s exited (%s)%s", ev.Agent, d.Status, indentTail(r.fresh(d.StderrTail)))
	case "agent.evicted":
		r.line(r.note, "", "agent %s stopped: %s", ev.Agent, d.Reason)
	case backends.EventSandboxRefused:
		r.sandbox(ev)
	case wiring.EventNetworkRefused:
		r.line(r.note, ansiRed, "agent %s: %s", ev.Agent, networkRefusedLine(ev))
	case backends.EventTurnEnded:
		d.Error = r.fresh(d.Error)
		r.line(r.out, turnColour(d.StopReason), "%s", turnSummary(d))
		r.said = nil
	case pool.EventUsageDropped:
		r.line(r.note, ansiRed, "agent %s: %s", ev.Agent, eventSummary(ev))
	case pool.EventSetupCopied, pool.EventSetupOutput:
		// Details for the log (events), not the turn's notes.
	default:
		if s := setupLine(ev); s != "" { // cli_trust.go
			r.line(r.note, "", "%s", s)
		}
	}
}

// fsAccess renders an fs.read or fs.write event (an acpfs.Op): a write
// the daemon made as "wrote", an access it refused or that failed as such,
// with the reason. Reads that succeeded, and reads of a missing file (an
// agent's usual probe), are not shown.
func (r *renderer) fsAccess(typ backends.EventType, d eventData) {
	op := "read"
	if typ == backends.EventFSWrite {
		op = "write"
	}
	switch {
	case d.Outcome == "" || d.Outcome == acpfs.OutcomeOK:
		if typ == backends.EventFSWrite {
			r.line(r.out, "", "  wrote %s", d.Path)
		}
	case d.Outcome == acpfs.OutcomeNotFound && typ == backends.EventFSRead:
		// An agent's probe for a file; not worth a line.
	case d.Outcome == acpfs.OutcomeRefused:
		r.line(r.out, ansiRed, "  %s %s refused: %s", op, d.Path, orUnknown(d.Error))
	default:
		r.line(r.out, ansiRed, "  %s %s failed: %s", op, d.Path, orUnknown(d.Error))
	}
}

// orUnknown is s, or a placeholder when the event gave no reason.
func orUnknown(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// sandbox renders a sandbox.refused event: each note on a line, with
// what to do.
func (r *renderer) sandbox(ev backends.Event) {
	var d backends.SandboxEventData
	if json.Unmarshal(ev.Data, &d) != nil {
		return
	}
	for _, n := range d.Refused {
		r.line(r.note, ansiRed, "sandbox of %s refused %s", ev.Agent, n)
	}
	for _, n := range d.Denied {
		r.line(r.note, ansiRed, "sandbox of %s denied %s", ev.Agent, n)
		r.fresh("sandbox: " + n.String())
	}
}

// fresh returns the lines of text not shown yet in this turn's notes,
// and remembers them as shown: an error that carries the agent's stderr
// tail, or a sandbox note, already shown shows only the rest ("…; last
// stderr:" with nothing after it goes too).
func (r *renderer) fresh(text string) string {
	if r.said == nil {
		r.said = map[string]bool{}
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		k := strings.TrimSpace(l)
		if k != "" && r.said[k] {
			continue
		}
		if k != "" && len(r.said) < maxSaidLines {
			r.said[k] = true
		}
		out = append(out, l)
	}
	s := strings.TrimSpace(strings.Join(out, "\n"))
	s = strings.TrimSuffix(s, "; last stderr:")
	return s
}

// maxSaidLines bounds the lines a renderer remembers in a turn.
const maxSaidLines = 1000

// toolSummary is a tool call in a few words.
func toolSummary(d eventData) string {
	s := d.Title
	if s == "" {
		s = d.Kind
	}
	var paths []string
	for _, l := range d.Locations {
		if l.Path != "" && !strings.Contains(s, l.Path) {
			paths = append(paths, l.Path)
		}
	}
	if len(paths) > 0 {
		s += " " + strings.Join(paths, ", ")
	}
	if d.Kind != "" && d.Kind != d.Title {
		s += " [" + d.Kind + "]"
	}
	return s
}

// permissionSummary is a permission request in a few words.
func permissionSummary(d eventData) string {
	s := d.Title
	if s == "" {
		s = d.Action
	}
	if d.Risk != "" {
		s += " (risk: " + d.Risk + ")"
	}
	return s
}

// turnSummary is the line that ends a turn.
func turnSummary(d eventData) string {
	s := fmt.Sprintf("— turn %d ended: %s after %s", d.Turn, d.StopReason, (time.Duration(d.DurationMS) * time.Millisecond).Round(100*time.Millisecond))
	if c := d.Changes; c != nil && c.Files > 0 {
		s += fmt.Sprintf("; %d file%s changed (+%d −%d)", c.Files, plural(c.Files), c.Additions, c.Deletions)
	}
	if u := d.Usage; u != nil && max(u.Total, u.Input+u.Output) > 0 {
		s += fmt.Sprintf("; %d tokens", max(u.Total, u.Input+u.Output))
	}
	if h := d.Hidden; h != nil && h.Count > 0 {
		s += fmt.Sprintf("; %d untracked path%s hidden by changed ignore rules", h.Count, plural(h.Count))
		if len(h.Files) > 0 {
			s += fmt.Sprintf(" (%s: %s)", h.Files[0].Rule, h.Files[0].Path)
		}
	}
	if h := d.History; h != nil && h.Refused != "" {
		s += "; agent's commits not taken onto the branch: " + h.Refused
		if h.Detail != "" {
			s += " (" + h.Detail + ")"
		}
		s += "; its files are in the checkpoint"
	} else if h != nil && h.Commits > 0 {
		s += fmt.Sprintf("; %d commit%s of the agent's on the branch", h.Commits, plural(h.Commits))
	}
	if d.Error != "" {
		s += "\n  " + strings.ReplaceAll(d.Error, "\n", "\n  ")
	}
	return s
}

// turnFailed says whether a stop reason makes the prompt command fail.
func turnFailed(stop string) bool {
	switch backends.StopReason(stop) {
	case backends.StopRefusal, backends.StopCancelled, backends.StopError, backends.StopTimeout:
		return true
	}
	return false
}

func turnColour(stop string) string {
	if turnFailed(stop) {
		return ansiRed
	}
	return ansiGreen
}

func indentTail(tail string) string {
	tail = strings.TrimSpace(tail)
	if tail == "" {
		return ""
	}
	return "\n  " + strings.ReplaceAll(tail, "\n", "\n  ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
