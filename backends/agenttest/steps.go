package agenttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// runSteps runs steps in order and reports whether cancel was closed first.
func (a *agent) runSteps(steps []Step, prompt string, cancel <-chan struct{}) bool {
	for _, s := range steps {
		if isClosed(cancel) {
			return true
		}
		if a.step(s, prompt, cancel) {
			return true
		}
	}
	return isClosed(cancel)
}

func isClosed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// step runs one step; it returns true when the turn was cancelled during it.
func (a *agent) step(s Step, prompt string, cancel <-chan struct{}) bool {
	switch {
	case s.Chunk != "":
		a.update(textUpdate("agent_message_chunk", a.expand(s.Chunk, prompt)))
	case s.Thought != "":
		a.update(textUpdate("agent_thought_chunk", s.Thought))
	case s.Chunks > 0 && s.ChunksPerSecond == 0:
		// A burst, as a model's reply often arrives: the chunks go out
		// in one write, each on its own line.
		burst, err := a.burst(s.Chunks)
		if err != nil {
			fmt.Fprintln(a.stderr, "fake agent: marshal:", err)
			return false
		}
		a.writeLines(burst)
	case s.Chunks > 0:
		start := time.Now()
		for i := 0; i < s.Chunks; i++ {
			if s.ChunksPerSecond > 0 {
				if isClosed(cancel) {
					return true
				}
				due := start.Add(time.Duration(i) * time.Second / time.Duration(s.ChunksPerSecond))
				if wait := time.Until(due); wait > 0 {
					time.Sleep(max(wait, time.Millisecond))
				}
			}
			a.update(textUpdate("agent_message_chunk", "c"))
		}
	case s.ToolCall != nil:
		a.update(a.toolCall("tool_call", *s.ToolCall))
	case s.ToolUpdate != nil:
		a.update(a.toolCall("tool_call_update", *s.ToolUpdate))
	case len(s.Update) > 0:
		a.update(s.Update)
	case s.Permission != nil:
		return a.permission(*s.Permission, prompt, cancel)
	case s.Read != nil:
		a.read(*s.Read)
	case s.Write != nil:
		a.writeFile(*s.Write, prompt)
	case s.Terminal != nil:
		a.terminal(*s.Terminal)
	case s.Request != nil:
		res, err := a.call(s.Request.Method, s.Request.Params)
		if err != nil {
			a.update(textUpdate("agent_message_chunk", "request error: "+err.Error()))
		} else {
			a.update(textUpdate("agent_message_chunk", "request result: "+string(res)))
		}
	case s.Notify != nil:
		a.notify(s.Notify.Method, s.Notify.Params)
	case s.SleepMs > 0:
		t := time.NewTimer(time.Duration(s.SleepMs) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-cancel:
			return true
		}
	case s.WaitCancel:
		if cancel == nil {
			return false
		}
		<-cancel
		return true
	case s.Crash != nil:
		fmt.Fprintln(a.stderr, "fake agent: crashing as scripted")
		if s.Stderr != "" {
			fmt.Fprintln(a.stderr, s.Stderr)
		}
		os.Exit(*s.Crash)
	case s.CrashOnce != "":
		if _, err := os.Stat(s.CrashOnce); err != nil {
			_ = os.WriteFile(s.CrashOnce, []byte("crashed\n"), 0o644)
			fmt.Fprintln(a.stderr, "fake agent: crashing once as scripted")
			os.Exit(3)
		}
	case s.Stderr != "":
		fmt.Fprintln(a.stderr, s.Stderr)
	case s.Garbage != "":
		a.writeRaw([]byte(s.Garbage))
	case s.Sys != nil:
		a.sys(*s.Sys)
	case len(s.Parallel) > 0:
		var wg sync.WaitGroup
		cancelled := make([]bool, len(s.Parallel))
		for i, p := range s.Parallel {
			wg.Go(func() { cancelled[i] = a.step(p, prompt, cancel) })
		}
		wg.Wait()
		return slices.Contains(cancelled, true)
	case s.MCPEcho:
		a.mcpEcho()
	case s.MCPStart:
		a.mcpStart()
	case s.MCPCall != nil:
		a.mcpCall(*s.MCPCall)
	case s.BigLine > 0 && s.BigLines > 0:
		line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/update",
			"params": a.updateParams(textUpdate("agent_message_chunk", strings.Repeat("x", s.BigLine)))})
		if err != nil {
			fmt.Fprintln(a.stderr, "fake agent: marshal:", err)
			return false
		}
		line = append(line, '\n')
		for range s.BigLines {
			a.writeLines(line)
		}
	case s.BigLine > 0:
		a.update(textUpdate("agent_message_chunk", strings.Repeat("x", s.BigLine)))
	}
	return false
}

func (a *agent) toolCall(kind string, t ToolCall) map[string]any {
	u := map[string]any{"sessionUpdate": kind, "toolCallId": t.ID}
	if t.Title != "" {
		u["title"] = t.Title
	}
	if t.Kind != "" {
		u["kind"] = t.Kind
	}
	if t.Status != "" {
		u["status"] = t.Status
	}
	if len(t.Locations) > 0 {
		locs := make([]any, 0, len(t.Locations))
		for _, l := range t.Locations {
			locs = append(locs, map[string]any{"path": a.abs(l)})
		}
		u["locations"] = locs
	}
	if len(t.RawInput) > 0 {
		u["rawInput"] = t.RawInput
	}
	if t.Text != "" {
		u["content"] = []any{map[string]any{"type": "content", "content": map[string]any{"type": "text", "text": t.Text}}}
	}
	return u
}

var defaultOptions = []Option{
	{ID: "allow", Name: "Allow", Kind: "allow_once"},
	{ID: "allow-always", Name: "Always allow", Kind: "allow_always"},
	{ID: "reject", Name: "Reject", Kind: "reject_once"},
}

func (a *agent) permission(p Permission, prompt string, cancel <-chan struct{}) bool {
	opts := p.Options
	if len(opts) == 0 {
		opts = defaultOptions
	}
	tc := a.toolCall("tool_call_update", p.ToolCall)
	delete(tc, "sessionUpdate")
	a.mu.Lock()
	sid := a.sessionID
	a.mu.Unlock()
	res, err := a.call("session/request_permission", map[string]any{"sessionId": sid, "toolCall": tc, "options": opts})
	if err != nil {
		a.update(textUpdate("agent_message_chunk", "permission error: "+err.Error()))
		return a.runSteps(p.Rejected, prompt, cancel)
	}
	var out struct {
		Outcome struct {
			Outcome  string `json:"outcome"`
			OptionID string `json:"optionId"`
		} `json:"outcome"`
	}
	_ = json.Unmarshal(res, &out)
	kind := ""
	for _, o := range opts {
		if o.ID == out.Outcome.OptionID {
			kind = o.Kind
		}
	}
	if out.Outcome.Outcome == "cancelled" {
		a.update(textUpdate("agent_message_chunk", "permission cancelled"))
		return isClosed(cancel)
	}
	a.update(textUpdate("agent_message_chunk", "permission: "+kind))
	if strings.HasPrefix(kind, "allow") {
		return a.runSteps(p.Allowed, prompt, cancel)
	}
	return a.runSteps(p.Rejected, prompt, cancel)
}

func (a *agent) read(op FileOp) {
	a.mu.Lock()
	sid := a.sessionID
	a.mu.Unlock()
	params := map[string]any{"sessionId": sid, "path": a.abs(op.Path)}
	if op.Line != nil {
		params["line"] = *op.Line
	}
	if op.Limit != nil {
		params["limit"] = *op.Limit
	}
	res, err := a.call("fs/read_text_file", params)
	if err != nil {
		if op.Echo || op.EchoLen {
			a.update(textUpdate("agent_message_chunk", "read error: "+err.Error()))
		}
		return
	}
	a.mu.Lock()
	a.lastRead = res
	a.mu.Unlock()
	if op.Echo {
		a.update(textUpdate("agent_message_chunk", "read: "+a.lastReadContent()))
	}
	if op.EchoLen {
		var out struct {
			Content string `json:"content"`
		}
		_ = json.Unmarshal(res, &out)
		a.update(textUpdate("agent_message_chunk", fmt.Sprintf("read %d bytes", len(out.Content))))
	}
}

func (a *agent) writeFile(op FileOp, prompt string) {
	a.mu.Lock()
	sid := a.sessionID
	a.mu.Unlock()
	_, err := a.call("fs/write_text_file", map[string]any{"sessionId": sid, "path": a.abs(op.Path), "content": a.expand(op.Content, prompt)})
	msg := "wrote " + op.Path
	if err != nil {
		msg = "write error: " + err.Error()
	}
	if op.Echo || err != nil {
		a.update(textUpdate("agent_message_chunk", msg))
	}
}

func (a *agent) terminal(t Terminal) {
	a.mu.Lock()
	sid := a.sessionID
	a.mu.Unlock()
	params := map[string]any{"sessionId": sid, "command": t.Command}
	if len(t.Args) > 0 {
		params["args"] = t.Args
	}
	if t.Cwd != "" {
		params["cwd"] = a.abs(t.Cwd)
	}
	if t.OutputByteLimit != nil {
		params["outputByteLimit"] = *t.OutputByteLimit
	}
	if len(t.Env) > 0 {
		var env []map[string]string
		for _, k := range slices.Sorted(maps.Keys(t.Env)) {
			env = append(env, map[string]string{"name": k, "value": t.Env[k]})
		}
		params["env"] = env
	}
	res, err := a.call("terminal/create", params)
	if err != nil {
		a.update(textUpdate("agent_message_chunk", "terminal error: "+err.Error()))
		return
	}
	var created struct {
		TerminalID string `json:"terminalId"`
	}
	_ = json.Unmarshal(res, &created)
	ref := map[string]any{"sessionId": sid, "terminalId": created.TerminalID}
	if t.NoWait {
		a.update(textUpdate("agent_message_chunk", "terminal created: "+created.TerminalID))
		return
	}
	exit, err := a.call("terminal/wait_for_exit", ref)
	if err != nil {
		a.update(textUpdate("agent_message_chunk", "terminal wait error: "+err.Error()))
	}
	out, err := a.call("terminal/output", ref)
	if err != nil {
		a.update(textUpdate("agent_message_chunk", "terminal output error: "+err.Error()))
	} else {
		var o struct {
			Output string `json:"output"`
		}
		_ = json.Unmarshal(out, &o)
		a.update(textUpdate("agent_message_chunk", "terminal output: "+o.Output+" exit: "+string(exit)))
	}
	if !t.NoRelease {
		_, _ = a.call("terminal/release", ref)
	}
}

// burst returns n chunk updates of the current session, a line each (the
// last one ending in a newline too), as one write. The last one made is
// kept: a benchmark's agent sends the same burst many times a second, and
// its cost is the machine's.
func (a *agent) burst(n int) ([]byte, error) {
	a.mu.Lock()
	sid := a.sessionID
	if b := a.lastBurst; b.sid == sid && b.n == n && b.lines != nil {
		a.mu.Unlock()
		return b.lines, nil
	}
	a.mu.Unlock()
	params := map[string]any{"sessionId": sid, "update": textUpdate("agent_message_chunk", "c")}
	line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": params})
	if err != nil {
		return nil, err
	}
	lines := bytes.Repeat(append(line, '\n'), n)
	a.mu.Lock()
	a.lastBurst.sid, a.lastBurst.n, a.lastBurst.lines = sid, n, lines
	a.mu.Unlock()
	return lines, nil
}
