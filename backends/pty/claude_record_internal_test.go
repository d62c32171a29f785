package pty

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// Environment of TestRecordClaude (make test-real).
const (
	envClaudeBin  = "AGENTPOOL_CLAUDE_BIN" // the real claude executable
	envRecordDir  = "AGENTPOOL_RECORD_DIR" // where to write the recordings
	claudeVersion = "AGENTPOOL_CLAUDE_VERSION"
	mockAPIKey    = "sk-ant-api03-agentpool-mock-key-0000000000000000000000000000000000000000000000000000000000-AAAAAAAA"
)

// The claude-cli provider's screen patterns (registry/builtin.go).
var (
	claudeReady = regexp.MustCompile(`(?m)^❯\x{a0} *$`)
	claudeBusy  = regexp.MustCompile(`(?m)(?i)esc to interrupt`)
)

// TestRecordClaude runs the real Claude Code in a terminal against a mock of
// the Anthropic Messages API on 127.0.0.1 and records the raw terminal
// traffic: start, a turn, a turn with a tool call, a cancel before the first
// token (Esc, then Ctrl-U on the restored prompt), and a restart with
// --continue. It runs only when AGENTPOOL_CLAUDE_BIN names the program (make
// test-real installs it) and writes into AGENTPOOL_RECORD_DIR, or a
// temporary directory.
func TestRecordClaude(t *testing.T) {
	bin := os.Getenv(envClaudeBin)
	if bin == "" {
		t.Skip(envClaudeBin + " is not set (make test-real)")
	}
	out := os.Getenv(envRecordDir)
	if out == "" {
		out = t.TempDir()
	}
	version := os.Getenv(claudeVersion)
	if version == "" {
		v, err := exec.Command(bin, "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", bin, err)
		}
		version = strings.Fields(string(v))[0]
	}
	work, home := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "notes.txt"), []byte("the notes say: ship on friday\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	seedClaudeHome(t, home, work, version)
	api := newMockMessages(t, work)
	env := []string{
		"HOME=" + home, "TERM=" + Term, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8",
		"ANTHROPIC_BASE_URL=" + api.URL, "ANTHROPIC_API_KEY=" + mockAPIKey,
		"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}

	// First run: start, two turns, a cancel before the first token.
	r := startRecorder(t, bin, nil, work, env, version)
	r.waitScreen(t, "the ready prompt", func(s string) bool { return claudeReady.MatchString(s) }, 60*time.Second)
	r.settle()
	r.prompt(t, "say hello")
	r.prompt(t, "what do the notes in notes.txt say?")
	r.type_(t, "hold on before answering", "prompt")
	r.waitScreen(t, "the busy hint", func(s string) bool { return claudeBusy.MatchString(s) }, 20*time.Second)
	time.Sleep(time.Second) // the spinner never settles
	r.key(t, "\x1b", "cancel")
	r.waitScreen(t, "the restored prompt", func(s string) bool {
		return strings.Contains(s, "❯\u00a0hold on before answering") && !claudeBusy.MatchString(s)
	}, 20*time.Second)
	r.settle()
	r.key(t, "\x15", "clear")
	r.waitScreen(t, "the empty prompt", func(s string) bool { return claudeReady.MatchString(s) }, 20*time.Second)
	r.settle()
	r.stop(t, filepath.Join(out, "claude-start-turns-cancel.json"))

	// Second run: --continue, one turn.
	r = startRecorder(t, bin, []string{"--continue"}, work, env, version)
	r.waitScreen(t, "the ready prompt", func(s string) bool { return claudeReady.MatchString(s) }, 60*time.Second)
	r.settle()
	r.prompt(t, "say hello again")
	r.stop(t, filepath.Join(out, "claude-continue.json"))
}

// seedClaudeHome writes ~/.claude.json as a user who finished onboarding,
// approved the API key and trusted the folder would have it.
func seedClaudeHome(t *testing.T, home, work, version string) {
	t.Helper()
	cfg := map[string]any{
		"hasCompletedOnboarding": true, "lastOnboardingVersion": version, "numStartups": 3, "theme": "dark",
		"autoUpdates":           false,
		"customApiKeyResponses": map[string]any{"approved": []string{mockAPIKey[len(mockAPIKey)-20:]}, "rejected": []string{}},
		"projects": map[string]any{work: map[string]any{
			"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true, "allowedTools": []string{},
		}},
	}
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(home, ".claude.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// recorder runs a program on a terminal and records its traffic.
type recorder struct {
	cmd    *exec.Cmd
	master *os.File
	rec    *Recording
	done   chan struct{}

	mu   sync.Mutex
	scr  *screen
	last time.Time
}

func startRecorder(t *testing.T, bin string, args []string, dir string, env []string, version string) *recorder {
	t.Helper()
	cols, rows := 100, 30
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = dir, env
	master, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	r := &recorder{cmd: cmd, master: master, done: make(chan struct{}), last: time.Now(),
		rec: &Recording{Program: "claude", Version: version, Source: "real", Args: args, Cols: cols, Rows: rows}}
	r.scr = newScreen(cols, rows, replyTo{master})
	go r.read()
	return r
}

// replyTo answers the program's terminal queries, as the backend does.
type replyTo struct{ w io.Writer }

func (r replyTo) Write(p []byte) (int, error) { return r.w.Write(p) }

func (r *recorder) read() {
	defer close(r.done)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.master.Read(buf)
		if n > 0 {
			r.mu.Lock()
			r.rec.Steps = append(r.rec.Steps, Step{MS: r.sinceLocked(), Out: bytes.Clone(buf[:n])})
			r.scr.write(buf[:n])
			r.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (r *recorder) sinceLocked() int {
	now := time.Now()
	ms := int(now.Sub(r.last) / time.Millisecond)
	r.last = now
	return ms
}

func (r *recorder) screenText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.scr.render())
}

func (r *recorder) waitScreen(t *testing.T, what string, ok func(string) bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for s := r.screenText(); !ok(s); s = r.screenText() {
		if time.Now().After(deadline) {
			t.Fatalf("claude never showed %s; screen:\n%s", what, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settle waits until the program has written nothing for a while.
func (r *recorder) settle() {
	for {
		r.mu.Lock()
		quiet := time.Since(r.last)
		r.mu.Unlock()
		if quiet > 700*time.Millisecond {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *recorder) write(t *testing.T, step Step) {
	t.Helper()
	r.mu.Lock()
	step.MS = r.sinceLocked()
	r.rec.Steps = append(r.rec.Steps, step)
	r.mu.Unlock()
	if _, err := r.master.Write(step.In); err != nil {
		t.Fatalf("type %q: %v", step.In, err)
	}
}

// type_ types a prompt as the backend does: the clear keys, the paste,
// and Enter.
func (r *recorder) type_(t *testing.T, text, note string) {
	t.Helper()
	r.mu.Lock()
	bracketed := r.scr.bracketed
	r.mu.Unlock()
	in := append([]byte("\x15"), pasteBytes(text, bracketed)...)
	r.write(t, Step{In: in, Note: note, Text: text})
	time.Sleep(DefaultSubmitDelay)
	r.write(t, Step{In: []byte(enterKey), Wait: []byte(enterKey), Note: "submit"})
}

// prompt types a prompt and waits for the answer: busy, then ready.
func (r *recorder) prompt(t *testing.T, text string) {
	t.Helper()
	r.type_(t, text, "prompt")
	r.waitScreen(t, "the busy hint", func(s string) bool { return claudeBusy.MatchString(s) }, 20*time.Second)
	r.waitScreen(t, "the answer", func(s string) bool { return claudeReady.MatchString(s) && !claudeBusy.MatchString(s) }, 60*time.Second)
	r.settle()
}

func (r *recorder) key(t *testing.T, k, note string) {
	t.Helper()
	r.write(t, Step{In: []byte(k), Wait: []byte(k), Note: note})
}

// stop hangs up the program, waits for it and saves the recording.
func (r *recorder) stop(t *testing.T, path string) {
	t.Helper()
	_ = r.master.Close()
	_ = r.cmd.Process.Signal(syscall.SIGHUP)
	exited := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-exited
	}
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.rec.Save(path); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %d steps into %s; last screen:\n%s", len(r.rec.Steps), path, r.scr.text())
}

// newMockMessages serves a small Anthropic Messages API: the main loop's
// requests (those with tools) get a streamed text reply, a Read tool call
// for a prompt that names notes.txt (and a text reply to its result), and
// no answer at all for "hold on" (until the client goes away); other
// requests get a short text.
func newMockMessages(t *testing.T, work string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(r.URL.Path, "count_tokens") {
			_, _ = w.Write([]byte(`{"input_tokens":12}`))
			return
		}
		if !strings.HasPrefix(r.URL.Path, "/v1/messages") {
			http.NotFound(w, r)
			return
		}
		var req struct {
			Stream   bool              `json:"stream"`
			Tools    []json.RawMessage `json:"tools"`
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		last := ""
		if n := len(req.Messages); n > 0 {
			last = string(req.Messages[n-1].Content)
		}
		var blocks []map[string]any
		stop := "end_turn"
		text := func(s string) { blocks = append(blocks, map[string]any{"type": "text", "text": s}) }
		switch {
		case len(req.Tools) == 0:
			text("OK")
		case strings.Contains(last, "hold on"):
			// Headers and a ping, then no token until the client
			// gives up: a cancel before the first token.
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: ping\ndata: {\"type\": \"ping\"}\n\n")
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Minute):
			}
			return
		case strings.Contains(last, "tool_result"):
			text("The notes say: ship on friday.")
		case strings.Contains(last, "notes.txt"):
			text("Let me read the notes.")
			blocks = append(blocks, map[string]any{"type": "tool_use", "id": "toolu_01", "name": "Read",
				"input": map[string]any{"file_path": filepath.Join(work, "notes.txt")}})
			stop = "tool_use"
		default:
			text("Hello from the mock model.")
		}
		msg := map[string]any{"id": "msg_mock", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
			"stop_reason": stop, "stop_sequence": nil, "usage": map[string]int{"input_tokens": 12, "output_tokens": 7}}
		if !req.Stream {
			msg["content"] = blocks
			_ = json.NewEncoder(w).Encode(msg)
			return
		}
		streamMessage(w, msg, blocks, stop)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// streamMessage writes msg as server-sent events, text in pieces.
func streamMessage(w http.ResponseWriter, msg map[string]any, blocks []map[string]any, stop string) {
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	send := func(name string, data map[string]any) {
		data["type"] = name
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"] = []any{}, nil
	send("message_start", map[string]any{"message": start})
	for i, b := range blocks {
		switch b["type"] {
		case "text":
			send("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, piece := range strings.SplitAfter(b["text"].(string), " ") {
				time.Sleep(30 * time.Millisecond)
				send("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			send("content_block_start", map[string]any{"index": i, "content_block": map[string]any{
				"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			input, _ := json.Marshal(b["input"])
			send("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
		}
		send("content_block_stop", map[string]any{"index": i})
	}
	send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": 7}})
	send("message_stop", map[string]any{})
}
