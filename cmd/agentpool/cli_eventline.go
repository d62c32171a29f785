package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/pool"
)

// eventLine is one event as one line of a log: seq, time, type, agent,
// turn and a short summary. The summary is the agent's words, escaped so
// that no control character reaches the terminal.
func eventLine(ev backends.Event) string {
	sum := termText(eventSummary(ev))
	s := fmt.Sprintf("#%-5d %s %-22s", ev.Seq, ev.Time.Local().Format(time.TimeOnly), ev.Type)
	if ev.Agent != "" {
		s += " " + termText(ev.Agent)
	}
	if ev.Turn != 0 {
		s += fmt.Sprintf(" turn %d", ev.Turn)
	}
	if sum != "" {
		s += "  " + sum
	}
	return s
}

// Event types of other packages that the summaries name: the terminal
// agents' screen and the daemon-wide stream's (which the CLI does not
// import, to stay a client of the API's JSON).
const (
	eventAgentEvicted    backends.EventType = "agent.evicted"
	eventUnknownUpdate   backends.EventType = "update.unknown"
	eventStreamEnd       backends.EventType = "stream.end"
	eventProviderChanged backends.EventType = "provider.changed"
	eventPoolStatus      backends.EventType = "pool.status"
)

// lineData is the union of the payload fields of the events that
// eventData does not cover, as the one-line summaries show them.
type lineData struct {
	// session.created
	Repo       string          `json:"repo"`
	Worktree   json.RawMessage `json:"worktree"`
	Branch     string          `json:"branch"`
	BaseCommit string          `json:"base_commit"`
	Warm       bool            `json:"warm"`
	Spare      bool            `json:"spare"`
	ForkedFrom string          `json:"forked_from"`
	// session.forked (From is the session forked: FromHost above)
	ForkTurn   int64   `json:"turn"`
	ForkEvents int64   `json:"events"`
	ForkTurns  int64   `json:"turns"`
	FilesMS    float64 `json:"files_ms"`
	// session.closed
	Discard bool `json:"discard"`
	// session.moved
	FromHost    string  `json:"from"`
	ToHost      string  `json:"to"`
	Lost        string  `json:"lost"`
	Interrupted []int64 `json:"interrupted_turns"`
	// session.merged
	Into    string `json:"into"`
	Method  string `json:"method"`
	Rebase  bool   `json:"rebase"`
	Commits []any  `json:"commits"`
	Head    string `json:"head"`
	// turn.queued, turn.dequeued
	Position int   `json:"position"`
	MaxWarm  int   `json:"max_warm"`
	WaitedMS int64 `json:"waited_ms"`
	// agent.starting, agent.evicted
	Kind     string `json:"kind"`
	Resume   string `json:"resume"`
	Restarts int    `json:"restarts"`
	WarmUp   bool   `json:"warm_up"`
	IdleFor  string `json:"idle_for"`
	Expected bool   `json:"expected"`
	// fs.read, fs.write
	Bytes   int64  `json:"bytes"`
	Outcome string `json:"outcome"`
	// terminal.*
	ID       string  `json:"id"`
	Signal   *string `json:"signal"`
	Duration int64   `json:"duration"`
	TimedOut bool    `json:"timed_out"`
	// commands, config, session.info, usage, update.unknown (ACP)
	AvailableCommands []struct {
		Name string `json:"name"`
	} `json:"availableCommands"`
	ConfigOptions []struct {
		ID           string `json:"id"`
		Name         string `json:"name"`
		CurrentValue any    `json:"currentValue"`
	} `json:"configOptions"`
	Used          *int64 `json:"used"`
	Size          *int64 `json:"size"`
	SessionUpdate string `json:"sessionUpdate"`
	// pty.screen
	Cols int `json:"cols"`
	Rows int `json:"rows"`
	// stream.end
	LastSeq int64 `json:"last_seq"`
	// provider.changed
	Added       []string `json:"added"`
	Removed     []string `json:"removed"`
	Enabled     []string `json:"enabled"`
	Disabled    []string `json:"disabled"`
	SpecChanged []string `json:"spec_changed"`
	Updated     []string `json:"updated"`
	Diagnostic  string   `json:"diagnostic"`
}

// eventSummary is the short, readable part of an event's line: every type
// the daemon emits has one, and an unknown type shows its data.
func eventSummary(ev backends.Event) string {
	d := decodeData(ev)
	var l lineData
	_ = json.Unmarshal(ev.Data, &l) // a payload of another shape shows less
	switch ev.Type {
	case backends.EventMessageChunk:
		role := d.Role
		if backends.IsUserEcho(role) {
			// The agent's words about what the user said, never the user's.
			role = "agent (echoing the user)"
		}
		return role + ": " + oneLine(d.Text, 80)
	case backends.EventToolCall, backends.EventToolUpdate:
		return strings.TrimSpace(toolSummary(d) + " " + d.Status)
	case backends.EventPlan:
		done := 0
		for _, e := range d.Entries {
			if e.Status == "completed" {
				done++
			}
		}
		return fmt.Sprintf("%d of %d step%s done", done, len(d.Entries), plural(len(d.Entries)))
	case backends.EventPermissionRequest:
		return "request " + d.Request + ": " + permissionSummary(d)
	case backends.EventPermissionResolved:
		return "request " + d.Request + ": " + d.Decision + " by " + d.DecidedBy
	case backends.EventTurnStarted:
		return oneLine(d.Prompt, 80)
	case backends.EventTurnEnded:
		// On one line, the error follows the summary after a colon.
		return oneLine(strings.Replace(turnSummary(d), "\n  ", ": ", 1), 100)
	case pool.EventTurnBriefing:
		return briefingLine(ev)
	case pool.EventTurnQueued:
		return fmt.Sprintf("waiting for an agent slot: position %d (all %d slots busy)", l.Position, l.MaxWarm)
	case pool.EventTurnDequeued:
		return fmt.Sprintf("got a slot after %s", (time.Duration(l.WaitedMS) * time.Millisecond).Round(100*time.Millisecond))
	case backends.EventSessionCreated:
		s := fmt.Sprintf("worktree on branch %s from %.12s of %s", l.Branch, l.BaseCommit, l.Repo)
		switch {
		case l.Spare:
			s += "; agent " + ev.Agent + " already running (a spare)"
		case l.Warm:
			s += "; agent " + ev.Agent + " starting now"
		}
		if l.ForkedFrom != "" {
			s += "; a fork of " + l.ForkedFrom
		}
		return s
	case pool.EventSessionForked:
		at := "as it was"
		if l.ForkTurn > 0 {
			at = fmt.Sprintf("at turn %d", l.ForkTurn)
		}
		return fmt.Sprintf("forked from %s %s: %d turn%s and %d events copied above; files copied in %.0f ms",
			l.FromHost, at, l.ForkTurns, plural(int(l.ForkTurns)), l.ForkEvents, l.FilesMS)
	case backends.EventSessionClosed:
		return closedSummary(l)
	case backends.EventSessionMoved:
		s := fmt.Sprintf("from %s to %s (%s)", l.FromHost, l.ToHost, d.Reason)
		if len(l.Interrupted) > 0 {
			s += fmt.Sprintf(", turn %v interrupted", l.Interrupted)
		}
		if l.Lost != "" {
			s += "; " + l.Lost
		}
		return oneLine(s, 160)
	case pool.EventSessionMerged:
		verb := "merged into " + l.Into
		if l.Rebase {
			verb = "rebased onto " + l.Into
		}
		return fmt.Sprintf("%s (%s, %d commit%s), now at %.12s", verb, l.Method, len(l.Commits), plural(len(l.Commits)), l.Head)
	case backends.EventAgentStarting:
		s := "starting"
		if l.Kind != "" {
			s += " (" + l.Kind + ")"
		}
		if l.WarmUp {
			s += ", warming up for the first prompt"
		}
		if l.Resume != "" {
			s += ", resuming its conversation"
		}
		if l.Restarts > 0 {
			s += fmt.Sprintf(", restart %d", l.Restarts)
		}
		return s
	case backends.EventAgentReady:
		if d.Resumed {
			return fmt.Sprintf("pid %d, resumed its conversation", d.PID)
		}
		return fmt.Sprintf("pid %d", d.PID)
	case backends.EventAgentExited:
		s := d.Status
		if d.Error != "" {
			s += ": " + d.Error
		} else if l.Expected {
			s += " (stopped by the daemon)"
		}
		return oneLine(s, 100)
	case backends.EventAgentContextLost:
		return oneLine("its conversation could not be resumed, a new one started: "+d.Reason, 100)
	case pool.EventAgentWarmSkipped:
		return oneLine("not started ahead of the first prompt: "+d.Reason, 100)
	case eventAgentEvicted:
		if l.IdleFor != "" {
			return "stopped: " + d.Reason + " for " + l.IdleFor
		}
		return oneLine("stopped: "+d.Reason, 100)
	case backends.EventSandboxRefused:
		return sandboxSummary(ev)
	case wiring.EventNetworkRefused:
		return networkRefusedLine(ev)
	case backends.EventMCP:
		return mcpSummary(ev) // cli_mcp.go
	case backends.EventFSRead, backends.EventFSWrite:
		op, verb := "read", "read"
		if ev.Type == backends.EventFSWrite {
			op, verb = "write", "wrote"
		}
		if l.Outcome != "" && l.Outcome != "ok" {
			return oneLine(fmt.Sprintf("%s %s %s: %s", op, d.Path, strings.ReplaceAll(l.Outcome, "_", " "), d.Error), 100)
		}
		return oneLine(fmt.Sprintf("%s %s (%s)", verb, d.Path, byteCount(l.Bytes)), 100)
	case backends.EventTerminalCreated:
		return oneLine("$ "+strings.TrimSpace(d.Command+" "+strings.Join(d.Args, " ")), 80)
	case backends.EventTerminalExited:
		return terminalExitSummary(d, l)
	case backends.EventPTYOutput:
		return oneLine(d.Data, 80)
	case backends.EventPTYScreen:
		return fmt.Sprintf("screen %dx%d: %s", l.Cols, l.Rows, oneLine(d.Text, 60))
	case backends.EventError:
		return oneLine(d.Error, 100)
	case backends.EventMode:
		return d.CurrentModeID
	case backends.EventCommands:
		names := make([]string, 0, len(l.AvailableCommands))
		for _, c := range l.AvailableCommands {
			names = append(names, "/"+c.Name)
		}
		return oneLine(fmt.Sprintf("%d command%s: %s", len(names), plural(len(names)), strings.Join(names, " ")), 100)
	case backends.EventConfig:
		opts := make([]string, 0, len(l.ConfigOptions))
		for _, o := range l.ConfigOptions {
			name := o.Name
			if name == "" {
				name = o.ID
			}
			opts = append(opts, fmt.Sprintf("%s=%v", name, o.CurrentValue))
		}
		return oneLine("options: "+strings.Join(opts, ", "), 100)
	case backends.EventSessionInfo:
		if d.Title != "" {
			return "title: " + oneLine(d.Title, 80)
		}
		return "session information updated"
	case backends.EventUsage:
		return usageSummary(ev, l) // cli_usage.go
	case pool.EventBudgetExceeded:
		var b pool.BudgetExceeded
		_ = json.Unmarshal(ev.Data, &b)
		if b.Cancelled {
			return oneLine("turn cancelled: "+b.Message, 200)
		}
		return oneLine(b.Message, 200)
	case pool.EventUsageDropped:
		var u pool.UsageDropped
		_ = json.Unmarshal(ev.Data, &u)
		return oneLine(fmt.Sprintf("dropped %s %s the agent reported: %s", u.Dropped, u.Value, u.Reason), 160)
	case pool.EventBudgetChanged:
		var b backends.Budget
		_ = json.Unmarshal(ev.Data, &b)
		return "session budget: " + budgetText(&b)
	case eventUnknownUpdate:
		return "an update this daemon does not know: " + l.SessionUpdate
	case backends.EventHistory:
		return historySummary(ev)
	case eventStreamEnd:
		return fmt.Sprintf("stream ended: %s (last event #%d)", d.Reason, l.LastSeq)
	case eventProviderChanged:
		return providerChangeSummary(l)
	case eventPoolStatus:
		return "the pool's agents and counters"
	}
	if s := setupLine(ev); s != "" { // cli_trust.go
		return s
	}
	return oneLine(string(ev.Data), 80)
}

// closedSummary is a session.closed event in a few words.
func closedSummary(l lineData) string {
	var w pool.RemoveResult
	_ = json.Unmarshal(l.Worktree, &w)
	switch {
	case w.Discarded || l.Discard:
		return "worktree removed, its work discarded"
	case w.BranchDeleted:
		return "worktree removed; no work, so branch " + w.Branch + " was deleted"
	case w.Committed:
		return fmt.Sprintf("worktree removed; its work is commit %.12s on branch %s", w.Commit, w.Branch)
	case w.Missing:
		return "the worktree was already gone; branch " + w.Branch + " kept"
	}
	return "worktree removed; branch " + w.Branch + " kept"
}

// terminalExitSummary is a terminal.exited event in a few words.
func terminalExitSummary(d eventData, l lineData) string {
	how := "exited"
	switch {
	case l.TimedOut:
		how = "timed out"
	case l.Signal != nil && *l.Signal != "":
		how = "killed by " + *l.Signal
	case d.ExitCode != nil:
		how = fmt.Sprintf("exited %d", *d.ExitCode)
	}
	cmd := oneLine(strings.TrimSpace(d.Command+" "+strings.Join(d.Args, " ")), 60)
	return fmt.Sprintf("%s %s after %s (%s of output)", cmd, how, time.Duration(l.Duration).Round(time.Millisecond), byteCount(l.Bytes))
}

// sandboxSummary is a sandbox.refused event in one line.
func sandboxSummary(ev backends.Event) string {
	var d backends.SandboxEventData
	if json.Unmarshal(ev.Data, &d) != nil {
		return oneLine(string(ev.Data), 80)
	}
	var parts []string
	for _, n := range d.Refused {
		parts = append(parts, fmt.Sprintf("refused %s", n))
	}
	for _, n := range d.Denied {
		parts = append(parts, fmt.Sprintf("denied %s", n))
	}
	return oneLine(strings.Join(parts, "; "), 120)
}

// networkRefusedLine is a network.refused event in one line: the target,
// why, and the entry of "sandbox.network" that would allow it.
func networkRefusedLine(ev backends.Event) string {
	var d wiring.NetworkRefusal
	if json.Unmarshal(ev.Data, &d) != nil || d.Host == "" {
		return oneLine(string(ev.Data), 80)
	}
	s := fmt.Sprintf("network refused: %s (%s)", hostPort(d.Host, d.Port), d.Reason)
	if d.Allow != "" {
		s += fmt.Sprintf(`; allow it with "sandbox.network": [..., %q]`, d.Allow)
	}
	return oneLine(s, 240)
}

// historySummary is a resumed agent's replayed event, summarised as the
// event it would have been.
func historySummary(ev backends.Event) string {
	var h struct {
		Type backends.EventType `json:"type"`
		Data json.RawMessage    `json:"data"`
	}
	if json.Unmarshal(ev.Data, &h) != nil || h.Type == "" || h.Type == backends.EventHistory {
		return oneLine(string(ev.Data), 80)
	}
	return "(replayed) " + string(h.Type) + " " + eventSummary(backends.Event{Type: h.Type, Data: h.Data})
}

// providerChangeSummary is a provider.changed event in a few words.
func providerChangeSummary(l lineData) string {
	var parts []string
	for _, p := range []struct {
		what string
		ids  []string
	}{{"added", l.Added}, {"removed", l.Removed}, {"enabled", l.Enabled}, {"disabled", l.Disabled}, {"changed", l.SpecChanged}, {"updated", l.Updated}} {
		if len(p.ids) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.ids, ", "))
		}
	}
	if l.Diagnostic != "" {
		parts = append(parts, "problem: "+l.Diagnostic)
	}
	if len(parts) == 0 {
		return "providers read again, nothing changed"
	}
	return oneLine(strings.Join(parts, "; "), 100)
}

// byteCount is n bytes for a reader: 512 B, 3.1 KiB, 2.0 MiB.
func byteCount(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
