package agenttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// The fake's session methods beyond session/new and session/load:
// session/resume, session/close and session/list, as the script
// advertises them.

// sessionCapabilities is the initialize answer's sessionCapabilities.
func (a *agent) sessionCapabilities() map[string]any {
	caps := map[string]any{}
	if a.script.ResumeSession {
		caps["resume"] = map[string]any{}
	}
	if a.script.CloseSession {
		caps["close"] = map[string]any{}
	}
	if a.script.ForkSession {
		caps["fork"] = map[string]any{}
	}
	if a.script.ListSessions {
		caps["list"] = map[string]any{}
	}
	return caps
}

// resumeSession answers session/resume: the session is taken up without
// replaying anything.
func (a *agent) resumeSession(m message) {
	var p struct {
		Cwd       string `json:"cwd"`
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	if !a.script.ResumeSession || a.script.ResumeFails {
		a.respondErr(m.ID, -32002, "Resource not found", map[string]any{"details": "Session not found"})
		return
	}
	a.mu.Lock()
	a.cwd = p.Cwd
	a.sessionID = p.SessionID
	a.mu.Unlock()
	a.respond(m.ID, a.sessionResult())
}

// forkSession answers session/fork: the agent's conversation goes on
// in a new session, "fork-of-" the session forked, in the cwd asked for.
func (a *agent) forkSession(m message) {
	var p struct {
		Cwd       string `json:"cwd"`
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	if !a.script.ForkSession || a.script.ForkFails || p.SessionID == "" {
		a.respondErr(m.ID, -32002, "Resource not found", map[string]any{"details": "Session not found"})
		return
	}
	a.mu.Lock()
	a.cwd = p.Cwd
	a.sessionID = "fork-of-" + p.SessionID
	sid := a.sessionID
	a.mu.Unlock()
	res := a.sessionResult()
	res["sessionId"] = sid
	a.respond(m.ID, res)
	a.announceCommands()
}

// listSessions answers session/list with the scripted sessions of the cwd
// asked for (all of them when none is).
func (a *agent) listSessions(m message) {
	if !a.script.ListSessions {
		a.respondErr(m.ID, -32601, "Method not found", map[string]any{"method": m.Method})
		return
	}
	var p struct {
		Cwd *string `json:"cwd"`
	}
	_ = json.Unmarshal(m.Params, &p)
	out := []SessionInfo{}
	for _, s := range a.script.Sessions {
		if p.Cwd == nil || s.Cwd == *p.Cwd {
			out = append(out, s)
		}
	}
	a.respond(m.ID, map[string]any{"sessions": out})
}

// logCall appends a session request or notification, or a
// $/cancel_request, to the script's CallLog.
func (a *agent) logCall(m message) {
	if a.script.CallLog == "" || !strings.HasPrefix(m.Method, "session/") && m.Method != "$/cancel_request" {
		return
	}
	var p struct {
		Cwd       string `json:"cwd"`
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	f, err := os.OpenFile(a.script.CallLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(a.stderr, "fake agent: call log:", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s %s\n", m.Method, p.SessionID, p.Cwd)
}

// logPrompt appends the content blocks of a session/prompt's params to
// the script's PromptLog, as one line.
func (a *agent) logPrompt(params json.RawMessage) {
	if a.script.PromptLog == "" {
		return
	}
	var p struct {
		Prompt json.RawMessage `json:"prompt"`
	}
	_ = json.Unmarshal(params, &p)
	var line bytes.Buffer
	if err := json.Compact(&line, p.Prompt); err != nil {
		line.Reset()
		line.WriteString("null")
	}
	line.WriteByte('\n')
	f, err := os.OpenFile(a.script.PromptLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(a.stderr, "fake agent: prompt log:", err)
		return
	}
	defer f.Close()
	_, _ = f.Write(line.Bytes())
}
