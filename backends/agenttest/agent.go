package agenttest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// message is any JSON-RPC message.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%d %s %s", e.Code, e.Message, e.Data) }

// agent is the scripted agent's state.
type agent struct {
	script Script
	in     *bufio.Reader
	stderr io.Writer

	wmu sync.Mutex
	out io.Writer

	mu        sync.Mutex
	nextID    int
	pending   map[string]chan message
	sessionID string
	cwd       string
	turns     int
	cancel    chan struct{} // closed by session/cancel for the running turn
	// stdinDone is closed when the client's stream has ended; it stops
	// the steps of ReplayAfterAnswer.
	stdinDone chan struct{}
	// lastRead is the raw result of the last fs/read_text_file, decoded
	// only when a step uses it (a 4 KiB answer costs tens of µs to decode).
	lastRead json.RawMessage
	// config is the session's mode and config options (config.go).
	config configState
	// mcp is what the last session/new or session/load carried;
	// mcpStdio its stdio servers, secrets included.
	mcp      []MCPReceived
	mcpStdio []stdioServer
	// lastBurst is the last burst of chunks made (see burst).
	lastBurst struct {
		sid   string
		n     int
		lines []byte
	}
}

// Run runs the scripted agent on the given streams until stdin ends. It is
// what a re-executed test binary and `agentpool demo-agent` call.
func Run(s Script, stdin io.Reader, stdout, stderr io.Writer) error {
	if s.IgnoreSIGTERM {
		ignoreTermSignals()
	}
	if s.Grandchild {
		if err := spawnGrandchild(); err != nil {
			fmt.Fprintln(stderr, "fake agent: grandchild:", err)
		}
	}
	for i := 0; i < s.StderrFlood; i++ {
		fmt.Fprintf(stderr, "fake agent: stderr flood line %d %s\n", i, strings.Repeat("x", 100))
	}
	s.LoginFile, s.CallLog, s.PromptLog = homePath(s.LoginFile), homePath(s.CallLog), homePath(s.PromptLog)
	a := &agent{
		script:    s,
		in:        bufio.NewReaderSize(stdin, 1<<20),
		out:       stdout,
		stderr:    stderr,
		nextID:    s.IDStart,
		pending:   map[string]chan message{},
		stdinDone: make(chan struct{}),
	}
	if s.StateDir != "" {
		if err := makeStateDir(homePath(s.StateDir)); err != nil {
			fmt.Fprintln(stderr, err)
			os.Exit(1)
		}
	}
	a.runSteps(s.StartSteps, "", nil)
	if s.ExitBeforeHandshake != nil {
		fmt.Fprintln(stderr, "fake agent: exiting before the handshake as scripted")
		os.Exit(*s.ExitBeforeHandshake)
	}
	return a.loop()
}

func (a *agent) loop() error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(a.stdinDone) // before the wait: it ends an endless replay
	for {
		line, err := a.in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var m message
			if jerr := json.Unmarshal(line, &m); jerr != nil {
				fmt.Fprintln(a.stderr, "fake agent: bad line from client:", jerr)
			} else {
				switch {
				case m.Method == "session/prompt":
					// Register the turn before reading on, so a session/cancel
					// right behind the prompt is never lost.
					cancel := make(chan struct{})
					a.mu.Lock()
					a.cancel = cancel
					a.mu.Unlock()
					wg.Add(1)
					go func() { defer wg.Done(); a.prompt(m, cancel) }()
				case m.Method == "session/new" && a.script.StopReadingAfterNew:
					a.handleRequest(m) // never returns: the loop stops reading
				case m.Method != "" && len(m.ID) > 0:
					wg.Add(1)
					go func() { defer wg.Done(); a.handleRequest(m) }()
				case m.Method != "":
					a.handleNotification(m)
				default:
					a.deliver(m)
				}
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func (a *agent) write(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintln(a.stderr, "fake agent: marshal:", err)
		return
	}
	a.writeRaw(b)
}

func (a *agent) writeRaw(b []byte) {
	a.writeLines(append(b, '\n'))
}

// writeLines writes b, whole lines each ending in a newline, in one write.
func (a *agent) writeLines(b []byte) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	_, _ = a.out.Write(b)
}

func (a *agent) respond(id json.RawMessage, result any) {
	a.write(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (a *agent) respondErr(id json.RawMessage, code int, msg string, data any) {
	a.write(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg, "data": data}})
}

// call sends a request to the client and waits for its answer.
func (a *agent) call(method string, params any) (json.RawMessage, error) {
	a.mu.Lock()
	var id json.RawMessage
	if a.script.StringIDs {
		id, _ = json.Marshal(fmt.Sprintf("req-%08d-4a7b-9c1d", a.nextID))
	} else {
		id = json.RawMessage(strconv.Itoa(a.nextID))
	}
	a.nextID++
	ch := make(chan message, 1)
	a.pending[string(id)] = ch
	a.mu.Unlock()
	a.write(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	m := <-ch
	if m.Error != nil {
		return nil, m.Error
	}
	return m.Result, nil
}

func (a *agent) deliver(m message) {
	a.mu.Lock()
	ch := a.pending[string(m.ID)]
	delete(a.pending, string(m.ID))
	a.mu.Unlock()
	if ch == nil {
		fmt.Fprintln(a.stderr, "fake agent: answer to unknown id", string(m.ID))
		return
	}
	ch <- m
}

func (a *agent) notify(method string, params any) {
	a.write(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

func (a *agent) update(u any) {
	a.notify("session/update", a.updateParams(u))
}

// updateParams are the params of a session/update carrying u.
func (a *agent) updateParams(u any) map[string]any {
	a.mu.Lock()
	sid := a.sessionID
	a.mu.Unlock()
	return map[string]any{"sessionId": sid, "update": u}
}

func (a *agent) handleNotification(m message) {
	a.logCall(m)
	switch m.Method {
	case "session/cancel":
		a.mu.Lock()
		if a.cancel != nil {
			select {
			case <-a.cancel:
			default:
				close(a.cancel)
			}
		}
		a.mu.Unlock()
	default:
		fmt.Fprintln(a.stderr, "fake agent: ignoring notification", m.Method)
	}
}

func (a *agent) handleRequest(m message) {
	if slices.Contains(a.script.Unanswered, m.Method) {
		fmt.Fprintln(a.stderr, "fake agent: not answering", m.Method, "as scripted")
		return
	}
	a.logCall(m)
	if a.needsLogin(m.Method) {
		msg := a.script.LoginMessage
		if msg == "" {
			msg = "Authentication required"
		}
		a.respondErr(m.ID, -32000, msg, nil)
		return
	}
	switch m.Method {
	case "initialize":
		a.initialize(m)
	case "authenticate":
		a.authenticate(m)
	case "session/resume":
		a.recordMCP(m.Method, m.Params)
		a.resumeSession(m)
	case "session/close":
		a.respond(m.ID, map[string]any{})
	case "session/fork":
		a.recordMCP(m.Method, m.Params)
		a.forkSession(m)
	case "session/list":
		a.listSessions(m)
	case "session/new":
		a.recordMCP(m.Method, m.Params)
		a.newSession(m)
	case "session/load":
		a.recordMCP(m.Method, m.Params)
		a.loadSession(m)
	case "session/set_mode":
		a.setMode(m)
	case "session/set_config_option":
		a.setConfigOption(m)
	default:
		a.respondErr(m.ID, -32601, "Method not found", map[string]any{"method": m.Method})
	}
}

func (a *agent) initialize(m message) {
	if a.script.HangOnInitialize {
		select {}
	}
	if a.script.InitDelayMs > 0 {
		time.Sleep(time.Duration(a.script.InitDelayMs) * time.Millisecond)
	}
	pv := a.script.ProtocolVersion
	if pv == 0 {
		pv = 1
	}
	name := a.script.AgentName
	if name == "" {
		name = "fake-agent"
	}
	a.respond(m.ID, map[string]any{
		"protocolVersion": pv,
		"agentCapabilities": map[string]any{
			"loadSession":         a.script.LoadSession,
			"sessionCapabilities": a.sessionCapabilities(),
			"promptCapabilities":  map[string]any{"image": false, "audio": false, "embeddedContext": a.script.EmbeddedContext},
			"mcpCapabilities":     map[string]any{"http": a.script.MCPHTTP, "sse": a.script.MCPSSE},
		},
		"authMethods": a.authMethods(),
		"agentInfo":   map[string]any{"name": name, "version": "0.0.1"},
	})
}

func (a *agent) sessionResult() map[string]any {
	res := map[string]any{}
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.configLocked()
	if len(a.script.Modes) > 0 {
		modes := make([]any, 0, len(a.script.Modes))
		for _, md := range a.script.Modes {
			modes = append(modes, map[string]any{"id": md.ID, "name": md.Name})
		}
		res["modes"] = map[string]any{"currentModeId": c.mode, "availableModes": modes}
	}
	if len(c.opts) > 0 {
		res["configOptions"] = slices.Clone(c.opts)
	}
	return res
}

func (a *agent) newSession(m message) {
	var p struct {
		Cwd string `json:"cwd"`
	}
	_ = json.Unmarshal(m.Params, &p)
	a.mu.Lock()
	a.cwd = p.Cwd
	a.sessionID = fmt.Sprintf("fake-%d-%d", os.Getpid(), time.Now().UnixNano())
	sid := a.sessionID
	a.mu.Unlock()
	a.runSteps(a.script.BeforeNewAnswer, "", nil)
	res := a.sessionResult()
	res["sessionId"] = sid
	a.respond(m.ID, res)
	a.announceCommands()
	if a.script.StopReadingAfterNew {
		fmt.Fprintln(a.stderr, "fake agent: no longer reading stdin")
		// A sleep, not an empty select: with no other goroutine left, the
		// runtime would call an empty select a deadlock and exit.
		time.Sleep(time.Duration(math.MaxInt64))
	}
}

func (a *agent) loadSession(m message) {
	var p struct {
		Cwd       string `json:"cwd"`
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	if !a.script.LoadSession || a.script.LoadFails {
		a.respondErr(m.ID, -32002, "Resource not found", map[string]any{"details": "Session not found"})
		return
	}
	a.mu.Lock()
	a.cwd = p.Cwd
	a.sessionID = p.SessionID
	a.mu.Unlock()
	a.replay(a.script.Replay, nil)
	a.respond(m.ID, a.sessionResult())
	a.announceCommands()
	a.replay(a.script.ReplayAfterAnswer, a.stdinDone)
}

// replay runs replay steps, each after ReplayDelayMs, until stop is closed.
func (a *agent) replay(steps []Step, stop <-chan struct{}) {
	for _, s := range steps {
		if a.script.ReplayDelayMs > 0 {
			t := time.NewTimer(time.Duration(a.script.ReplayDelayMs) * time.Millisecond)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return
			}
		}
		if a.runSteps([]Step{s}, "", stop) {
			return
		}
	}
}

func (a *agent) turnFor(n int) Turn {
	if len(a.script.Turns) == 0 {
		return Turn{Echo: true}
	}
	if n >= len(a.script.Turns) {
		n = len(a.script.Turns) - 1
	}
	return a.script.Turns[n]
}

func (a *agent) prompt(m message, cancel chan struct{}) {
	var p struct {
		Prompt []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"prompt"`
	}
	_ = json.Unmarshal(m.Params, &p)
	a.logPrompt(m.Params)
	// The prompt is its last text block, the user's words: what comes
	// before (a briefing) is in the PromptLog.
	var text strings.Builder
	for i := len(p.Prompt) - 1; i >= 0; i-- {
		if p.Prompt[i].Type == "text" || p.Prompt[i].Type == "" {
			text.WriteString(p.Prompt[i].Text)
			break
		}
	}
	a.mu.Lock()
	t := a.turnFor(a.turns)
	a.turns++
	a.mu.Unlock()
	if t.Echo {
		a.update(textUpdate("agent_message_chunk", "echo: "+text.String()))
	}
	cancelled := a.runSteps(t.Steps, text.String(), cancel)
	if cancelled && t.IgnoreCancel {
		select {} // never answer: the client must stop us
	}
	stop := t.StopReason
	if stop == "" {
		stop = "end_turn"
	}
	if cancelled {
		stop = "cancelled"
	}
	answer := map[string]any{"stopReason": stop}
	if t.UserMessageID != "" {
		answer["userMessageId"] = t.UserMessageID
	}
	if len(t.Usage) > 0 {
		answer["usage"] = t.Usage
	}
	a.respond(m.ID, answer)
	a.runSteps(t.After, text.String(), nil)
}

func textUpdate(kind, text string) map[string]any {
	return map[string]any{"sessionUpdate": kind, "content": map[string]any{"type": "text", "text": text}}
}

func (a *agent) abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return filepath.Join(a.cwd, p)
}

func (a *agent) expand(s, prompt string) string {
	last := ""
	if strings.Contains(s, "{{read}}") {
		last = a.lastReadContent()
	}
	return a.expandConfig(strings.NewReplacer("{{prompt}}", prompt, "{{read}}", last).Replace(s))
}

// lastReadContent is the content of the last successful read.
func (a *agent) lastReadContent() string {
	a.mu.Lock()
	raw := a.lastRead
	a.mu.Unlock()
	var out struct {
		Content string `json:"content"`
	}
	_ = json.Unmarshal(raw, &out)
	return out.Content
}
