package acp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/internal/mockmodel"
)

// Environment of the ACP recorders (make test-real-acp). Each recorder
// runs only when its variable names the real agent's program.
const (
	envClaudeACPBin  = "AGENTPOOL_CLAUDE_ACP_BIN" // claude-agent-acp
	envCodexACPBin   = "AGENTPOOL_CODEX_ACP_BIN"  // codex-acp
	envGeminiBin     = "AGENTPOOL_GEMINI_BIN"     // gemini (run with --acp)
	envCopilotBin    = "AGENTPOOL_COPILOT_BIN"    // copilot (run with --acp)
	envQwenBin       = "AGENTPOOL_QWEN_BIN"       // qwen (run with --acp)
	envOpencodeBin   = "AGENTPOOL_OPENCODE_BIN"   // opencode (run as opencode acp)
	envTranscriptDir = "AGENTPOOL_TRANSCRIPT_DIR" // where to write; default a temp dir
	envNpmPrefix     = "AGENTPOOL_NPM_PREFIX"     // the agents' install prefix, redacted
)

// recordPrompt is the prompt of every recorded turn.
const recordPrompt = "say hello"

// recording is what a recorder needs to know of one agent.
type recording struct {
	agent, pkg string
	bin        string
	args       []string
	env        []string
	home       string // the agent's HOME, seeded by the caller
	model      string // what answered, for the header
	modelURL   string // the mock's base URL, redacted
}

// recordACP runs the real agent through the ACP backend with a tap on the
// wire: initialize, session/new in a fresh git repository, the updates
// that follow it, one prompt, a session/set_mode when the agent has more
// than one mode, and the stop. It writes the redacted transcript as
// <agent>-<version>.jsonl into AGENTPOOL_TRANSCRIPT_DIR.
func recordACP(t *testing.T, rc recording) {
	t.Helper()
	out := os.Getenv(envTranscriptDir)
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	work := gitRepo(t)
	var (
		mu    sync.Mutex
		lines []agenttest.TranscriptLine
		last  = time.Now()
	)
	tap := func(inbound bool, line []byte) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		from := agenttest.FromClient
		if inbound {
			from = agenttest.FromAgent
		}
		lines = append(lines, agenttest.TranscriptLine{MS: now.Sub(last).Milliseconds(), From: from, Msg: bytes.Clone(line)})
		last = now
	}
	quiet := func(d time.Duration) {
		for {
			mu.Lock()
			q := time.Since(last)
			mu.Unlock()
			if q >= d {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	outside := &recorder{}
	spec := backends.Spec{Provider: rc.agent, Kind: backends.KindACP, Path: rc.bin, Args: rc.args, Dir: work,
		Env: append([]string{"HOME=" + rc.home}, rc.env...)}
	b, err := acp.New(acp.Config{Spec: spec, Wire: tap, OnEvent: outside.add, StopGrace: 2 * time.Second, KillGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	}
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := b.Start(ctx, "")
	if err != nil {
		t.Fatalf("start %s: %v", rc.agent, err)
	}
	t.Logf("%s %s: modes %v (current %q), config options %d bytes", info.AgentName, info.AgentVersion, info.Modes, info.CurrentMode, len(info.ConfigOptions))
	// The updates that follow session/new (commands, modes, options) come
	// when the agent is ready: wait for the commands, then for quiet.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && !hasType(outside, backends.EventCommands) {
		time.Sleep(50 * time.Millisecond)
	}
	quiet(1500 * time.Millisecond)

	turn := &recorder{}
	res, err := b.Prompt(ctx, backends.Prompt{Text: recordPrompt, Turn: 1}, turn.add)
	if err != nil {
		t.Fatalf("prompt %s: %v", rc.agent, err)
	}
	t.Logf("turn: %s, text %q", res.StopReason, strings.Join(turn.texts(backends.RoleAgent), ""))
	quiet(1500 * time.Millisecond)
	if info := b.Info(); len(info.Modes) > 1 {
		next := info.Modes[0].ID
		for i, m := range info.Modes {
			if m.ID == info.CurrentMode {
				next = info.Modes[(i+1)%len(info.Modes)].ID
			}
		}
		if err := b.SetMode(ctx, next); err != nil {
			t.Errorf("set mode %q: %v", next, err)
		}
		quiet(time.Second)
	} else if id, value := nextModeOption(b.Info().ConfigOptions); id != "" {
		// An agent whose modes are only a config option (opencode).
		if err := b.SetConfigOption(ctx, id, value); err != nil {
			t.Errorf("set config option %q to %q: %v", id, value, err)
		}
		quiet(time.Second)
	}
	stop()

	version := info.AgentVersion
	if version == "" {
		version = "unknown"
	}
	tr := agenttest.Transcript{Header: agenttest.TranscriptHeader{
		Agent: rc.agent, Package: rc.pkg, Version: version,
		Command: append([]string{filepath.Base(rc.bin)}, rc.args...), Model: rc.model,
	}}
	mu.Lock()
	repl := map[string]string{work: agenttest.PlaceholderCwd, rc.home: agenttest.PlaceholderHome}
	if real, err := filepath.EvalSymlinks(work); err == nil {
		repl[real] = agenttest.PlaceholderCwd
	}
	if p := os.Getenv(envNpmPrefix); p != "" {
		repl[p] = "$PREFIX"
	}
	if rc.modelURL != "" {
		// Agents name the mock by its address in warnings, too.
		repl[strings.TrimPrefix(rc.modelURL, "http://")] = "$MODEL_HOST"
	}
	for _, l := range lines {
		l.Msg = redact(l.Msg, repl)
		tr.Lines = append(tr.Lines, l)
	}
	mu.Unlock()
	path := filepath.Join(out, rc.agent+"-"+version+".jsonl")
	if err := tr.Write(path); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if left := machinePath.FindAll(raw, 5); len(left) > 0 {
		t.Errorf("transcript still names machine paths: %q", left)
	}
	t.Logf("recorded %d lines into %s", len(tr.Lines), path)
}

// nextModeOption returns the config option of category "mode" and the
// value after its current one, or "" when there is none.
func nextModeOption(raw json.RawMessage) (id, value string) {
	var opts []struct {
		ID       string `json:"id"`
		Category string `json:"category"`
		Current  string `json:"currentValue"`
		Options  []struct {
			Value string `json:"value"`
		} `json:"options"`
	}
	if json.Unmarshal(raw, &opts) != nil {
		return "", ""
	}
	for _, o := range opts {
		if o.Category != "mode" || len(o.Options) < 2 {
			continue
		}
		next := o.Options[0].Value
		for i, v := range o.Options {
			if v.Value == o.Current {
				next = o.Options[(i+1)%len(o.Options)].Value
			}
		}
		return o.ID, next
	}
	return "", ""
}

// machinePath finds paths a redacted transcript should not name.
var machinePath = regexp.MustCompile(`(/tmp/|/root/|/home/|127\.0\.0\.1:)[^"\s]*`)

// redact replaces each key of repl in msg with its value, the longest key
// first, as the text appears inside a JSON string.
func redact(msg []byte, repl map[string]string) []byte {
	keys := make([]string, 0, len(repl))
	for k := range repl {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		msg = bytes.ReplaceAll(msg, []byte(k), []byte(repl[k]))
		esc := strings.ReplaceAll(k, "/", `\/`)
		msg = bytes.ReplaceAll(msg, []byte(esc), []byte(repl[k]))
	}
	return msg
}

func hasType(r *recorder, typ backends.EventType) bool {
	for _, e := range r.all() {
		if e.Type == typ {
			return true
		}
	}
	return false
}

// gitRepo makes a git repository with one commit, as a session's worktree.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "README.md"), "# demo\n")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "."},
		{"-c", "user.name=agentpool", "-c", "user.email=agentpool@example.invalid", "commit", "-q", "-m", "init"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// TestRecordClaudeACP records claude-agent-acp against a mock of the
// Anthropic Messages API on 127.0.0.1.
func TestRecordClaudeACP(t *testing.T) {
	bin := os.Getenv(envClaudeACPBin)
	if bin == "" {
		t.Skip(envClaudeACPBin + " is not set (make test-real-acp)")
	}
	api := mockmodel.New(t, mockmodel.Anthropic, mockmodel.Config{})
	home := t.TempDir()
	recordACP(t, recording{
		agent: "claude", pkg: "@agentclientprotocol/claude-agent-acp", bin: bin, home: home,
		model: "mock Anthropic Messages API", modelURL: api.URL,
		env: []string{
			"ANTHROPIC_BASE_URL=" + api.URL, "ANTHROPIC_API_KEY=" + mockmodel.AnthropicKey, "IS_SANDBOX=1",
			"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			"DISABLE_ERROR_REPORTING=1",
		},
	})
}

// TestRecordCodexACP records codex-acp against a mock of the OpenAI
// Responses API on 127.0.0.1, configured as a model provider of its own.
func TestRecordCodexACP(t *testing.T) {
	bin := os.Getenv(envCodexACPBin)
	if bin == "" {
		t.Skip(envCodexACPBin + " is not set (make test-real-acp)")
	}
	api := mockmodel.New(t, mockmodel.Responses, mockmodel.Config{})
	home := t.TempDir()
	codexHome := filepath.Join(home, ".codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(codexHome, "config.toml"), `model = "gpt-5-codex"
model_provider = "mock"

[model_providers.mock]
name = "mock"
base_url = "`+api.URL+`/v1"
wire_api = "responses"
env_key = "MOCK_OPENAI_KEY"
`)
	recordACP(t, recording{
		agent: "codex", pkg: "@zed-industries/codex-acp", bin: bin, home: home,
		model: "mock OpenAI Responses API", modelURL: api.URL,
		env: []string{"CODEX_HOME=" + codexHome, "MOCK_OPENAI_KEY=sk-mock", "OPENAI_API_KEY=sk-mock",
			"OPENAI_BASE_URL=" + api.URL + "/v1"},
	})
}

// TestRecordGeminiACP records gemini --acp against a mock of the Gemini
// API on 127.0.0.1.
func TestRecordGeminiACP(t *testing.T) {
	bin := os.Getenv(envGeminiBin)
	if bin == "" {
		t.Skip(envGeminiBin + " is not set (make test-real-acp)")
	}
	api := mockmodel.New(t, mockmodel.Gemini, mockmodel.Config{})
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".gemini"), 0o700); err != nil {
		t.Fatal(err)
	}
	settings, _ := json.Marshal(map[string]any{
		// An untrusted folder refuses the privileged modes ("Cannot
		// enable privileged approval modes in an untrusted folder").
		"security": map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"},
			"folderTrust": map[string]any{"enabled": false}},
		"general":   map[string]any{"disableAutoUpdate": true, "disableUpdateNag": true},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
	})
	writeFile(t, filepath.Join(home, ".gemini", "settings.json"), string(settings))
	recordACP(t, recording{
		agent: "gemini", pkg: "@google/gemini-cli", bin: bin, args: []string{"--acp"}, home: home,
		model: "mock Gemini API", modelURL: api.URL,
		env: []string{"GEMINI_API_KEY=mock-key", "GOOGLE_GEMINI_BASE_URL=" + api.URL, "GEMINI_CLI_NO_RELAUNCH=true"},
	})
}

// TestRecordCopilotACP records copilot --acp in its offline mode with a
// model provider of the user's own (BYOK): the mock of the Anthropic
// Messages API on 127.0.0.1. Offline, it needs no GitHub login.
func TestRecordCopilotACP(t *testing.T) {
	bin := os.Getenv(envCopilotBin)
	if bin == "" {
		t.Skip(envCopilotBin + " is not set (make test-real-acp)")
	}
	api := mockmodel.New(t, mockmodel.Anthropic, mockmodel.Config{})
	home := t.TempDir()
	recordACP(t, recording{
		agent: "copilot", pkg: "@github/copilot", bin: bin, args: []string{"--acp"}, home: home,
		model: "mock Anthropic Messages API (BYOK)", modelURL: api.URL,
		env: []string{"COPILOT_OFFLINE=true", "COPILOT_AUTO_UPDATE=false", "COPILOT_PROVIDER_TYPE=anthropic",
			"COPILOT_PROVIDER_BASE_URL=" + api.URL, "COPILOT_PROVIDER_API_KEY=" + mockmodel.AnthropicKey,
			"COPILOT_MODEL=claude-sonnet-4-5"},
	})
}

// TestRecordQwenACP records qwen --acp against a mock of the OpenAI Chat
// Completions API on 127.0.0.1.
func TestRecordQwenACP(t *testing.T) {
	bin := os.Getenv(envQwenBin)
	if bin == "" {
		t.Skip(envQwenBin + " is not set (make test-real-acp)")
	}
	api := mockmodel.New(t, mockmodel.ChatCompletions, mockmodel.Config{})
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".qwen"), 0o700); err != nil {
		t.Fatal(err)
	}
	settings, _ := json.Marshal(map[string]any{
		"security": map[string]any{"auth": map[string]any{"selectedType": "openai"},
			"folderTrust": map[string]any{"enabled": false}},
		"general":   map[string]any{"disableAutoUpdate": true, "disableUpdateNag": true},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
	})
	writeFile(t, filepath.Join(home, ".qwen", "settings.json"), string(settings))
	recordACP(t, recording{
		agent: "qwen", pkg: "@qwen-code/qwen-code", bin: bin, args: []string{"--acp"}, home: home,
		model: "mock OpenAI Chat Completions API", modelURL: api.URL,
		env: []string{"OPENAI_API_KEY=sk-mock", "OPENAI_BASE_URL=" + api.URL + "/v1", "OPENAI_MODEL=qwen3-coder-plus",
			"QWEN_CODE_NO_RELAUNCH=true"},
	})
}

// TestRecordOpencodeACP records opencode acp with its anthropic provider
// pointed at the mock of the Anthropic Messages API on 127.0.0.1, and its
// model catalogue kept to the one it ships.
func TestRecordOpencodeACP(t *testing.T) {
	bin := os.Getenv(envOpencodeBin)
	if bin == "" {
		t.Skip(envOpencodeBin + " is not set (make test-real-acp)")
	}
	api := mockmodel.New(t, mockmodel.Anthropic, mockmodel.Config{})
	home := t.TempDir()
	cfgDir := filepath.Join(home, ".config", "opencode")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{
		"model": "anthropic/claude-sonnet-4-5", "autoupdate": false, "share": "disabled",
		"provider": map[string]any{"anthropic": map[string]any{"options": map[string]any{
			"baseURL": api.URL + "/v1", "apiKey": mockmodel.AnthropicKey}}},
	})
	writeFile(t, filepath.Join(cfgDir, "opencode.json"), string(cfg))
	recordACP(t, recording{
		agent: "opencode", pkg: "opencode-ai", bin: bin, args: []string{"acp"}, home: home,
		model: "mock Anthropic Messages API", modelURL: api.URL,
		env: []string{"OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1",
			"ANTHROPIC_API_KEY=" + mockmodel.AnthropicKey},
	})
}
