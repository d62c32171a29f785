package acp_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// Transcripts of real agents (testdata/transcripts, recorded by
// make test-real-acp) replayed through the backend. Every agent recorded
// offers modes in its session/new answer (as "modes", as the config option
// of category "mode", or both) and sends available_commands_update. What each recording shows beside that, and how the
// backend takes it:
//
//   - claude-agent-acp 0.49: the modes are mirrored as the config option
//     "mode", and the model and effort choices are config options too
//     ("model", category "model"; "effort", category "thought_level"):
//     there is no separate models list. session/set_mode sends a
//     config_option_update before its answer (Info.ConfigOptions follows
//     it). The turn starts with an empty agent_message_chunk, sends
//     usage_update before and after its text and answers session/prompt
//     with usage. session/new takes about 2 s.
//   - claude-agent-acp 0.101: other modes (default is now "Manual"; the
//     session starts in "auto") and two more config options ("fast",
//     "ultracode", category "model_config"); an extension notification
//     _auth/status_update before the session/new answer (ACP-NOTES item
//     8: ignored); available_commands_update again inside the turn; a
//     warning about auto mode billing that names the model's address
//     appended to the turn's text as one more agent_message_chunk (item
//     13: it is part of the turn's text); a session_info_update with a
//     title after the session/prompt answer (item 7: delivered outside the
//     turn); session/new takes about 7 s.
//   - codex-acp 0.16: starts in mode "read-only"; mirrors its modes as
//     the config option "mode" ("Approval Preset") beside "model"; sends
//     the config_option_update of a session/set_mode after its answer
//     (item 7: the update still reaches Info); puts a warning about the
//     model ("Model metadata for ... not found") into the turn's message
//     text with no separator before the model's words (item 13); writes
//     "result" before "id" in its answers. It lists auth methods but needs
//     no authenticate when its model provider has a key.
//   - gemini --acp 0.61: no config options; a "models" object in the
//     session/new answer (the unstable model API); session/set_mode is
//     reported not as current_mode_update but as an agent_message_chunk
//     "[MODE_UPDATE] <mode>" outside any turn, so Info.CurrentMode comes
//     from the set_mode answer alone; in a folder it does not trust,
//     set_mode of a privileged mode fails with -32603 and data.details
//     "Cannot enable privileged approval modes in an untrusted folder"
//     (the recorder turns folder trust off). Usage comes only in the
//     session/prompt answer's _meta.quota. initialize takes about 3.5 s.
//   - copilot --acp 1.0.102 (offline, with a model provider of the
//     user's own): mode ids are URLs; config options "mode" and
//     "allow_all" (category "permissions"); available_commands_update
//     both before and after the session/new answer (item 7: updates
//     before the answer are kept); a config_option_update with unchanged
//     values and a session_info_update at the start of the turn;
//     session/set_mode sends current_mode_update and config_option_update
//     before its answer. Its auth method names the absolute path of its
//     own binary. initialize takes about 13 s offline.
//   - qwen --acp 0.15.10 (the newest for Node 20): config options "mode"
//     and "model" beside a "models" object whose ids look like
//     "$runtime|openai|<model>(openai)"; the turn ends with an empty
//     agent_message_chunk whose _meta carries the usage; session/set_mode
//     sends no update at all, so Info.CurrentMode comes from the answer.
//     Auth methods are terminal logins (_meta.type "terminal").
//   - opencode acp 1.18.33: no "modes" at all: its modes (build, plan)
//     are only the config option "mode", beside "model" and "effort", so
//     the recorder switches them with session/set_config_option, which
//     answers with every option (Info.ConfigOptions takes the answer).
//     Session ids are not UUIDs ("ses_..."); chunks carry message ids.
//     initialize takes about 25 s and session/new about 10 s the first
//     time (it sets up its state and database).

// transcriptWant is what a transcript says the backend must show.
type transcriptWant struct {
	modes       []string
	currentMode string
	config      json.RawMessage // the session/new answer's configOptions
	commands    []string        // the last available_commands_update before the prompt
	prompt      string
	text        string // the turn's agent_message_chunk texts, joined
	stop        string
	// tokensIn and tokensOut are the tokens the prompt answer reports, in
	// its usage or (gemini) its _meta.quota.token_count; 0 when none.
	tokensIn, tokensOut int64
	setMode             string          // the mode of the recorded session/set_mode
	configAfter         json.RawMessage // a config_option_update after the set_mode
	textAfter           []string        // agent_message_chunk texts after the set_mode
	// setOption and setValue are the recorded session/set_config_option;
	// configSet is the config options after it (its answer's, or those
	// of an update after it).
	setOption, setValue string
	configSet           json.RawMessage
}

// wantOf reads the expectations out of a transcript.
func wantOf(t *testing.T, tr agenttest.Transcript) transcriptWant {
	t.Helper()
	var w transcriptWant
	methods := map[string]string{} // client request id -> method, the last one
	phase := "start"
	for _, l := range tr.Lines {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(l.Msg, &m); err != nil {
			t.Fatal(err)
		}
		switch {
		case l.From == agenttest.FromClient && m.Method == "session/prompt":
			var p struct {
				Prompt []struct {
					Text string `json:"text"`
				} `json:"prompt"`
			}
			_ = json.Unmarshal(m.Params, &p)
			w.prompt, phase = p.Prompt[0].Text, "turn"
		case l.From == agenttest.FromClient && m.Method == "session/set_mode":
			var p struct {
				ModeID string `json:"modeId"`
			}
			_ = json.Unmarshal(m.Params, &p)
			w.setMode, phase = p.ModeID, "mode"
		case l.From == agenttest.FromClient && m.Method == "session/set_config_option":
			var p struct {
				ConfigID string `json:"configId"`
				Value    string `json:"value"`
			}
			_ = json.Unmarshal(m.Params, &p)
			w.setOption, w.setValue, phase = p.ConfigID, p.Value, "option"
		case l.From == agenttest.FromAgent && m.Method == "session/update":
			var p struct {
				Update struct {
					Kind     string `json:"sessionUpdate"`
					Commands []struct {
						Name string `json:"name"`
					} `json:"availableCommands"`
					Content struct {
						Text string `json:"text"`
					} `json:"content"`
					ConfigOptions json.RawMessage `json:"configOptions"`
				} `json:"update"`
			}
			_ = json.Unmarshal(m.Params, &p)
			u := p.Update
			switch {
			case u.Kind == "available_commands_update" && phase == "start":
				w.commands = w.commands[:0]
				for _, c := range u.Commands {
					w.commands = append(w.commands, c.Name)
				}
			case u.Kind == "agent_message_chunk" && phase == "turn":
				w.text += u.Content.Text
			case u.Kind == "agent_message_chunk" && phase == "mode":
				w.textAfter = append(w.textAfter, u.Content.Text)
			case u.Kind == "config_option_update" && phase == "mode":
				w.configAfter = u.ConfigOptions
			case u.Kind == "config_option_update" && phase == "option":
				w.configSet = u.ConfigOptions
			}
		}
		if l.From == agenttest.FromClient && m.Method != "" && len(m.ID) > 0 {
			methods[string(m.ID)] = m.Method
			continue
		}
		if l.From != agenttest.FromAgent || m.Method != "" || len(m.Result) == 0 {
			continue
		}
		switch methods[string(m.ID)] {
		case "session/new":
			var r struct {
				Modes *struct {
					Current   string `json:"currentModeId"`
					Available []struct {
						ID string `json:"id"`
					} `json:"availableModes"`
				} `json:"modes"`
				ConfigOptions json.RawMessage `json:"configOptions"`
			}
			_ = json.Unmarshal(m.Result, &r)
			if r.Modes != nil {
				w.currentMode = r.Modes.Current
				for _, md := range r.Modes.Available {
					w.modes = append(w.modes, md.ID)
				}
			}
			w.config = r.ConfigOptions
		case "session/prompt":
			var r struct {
				StopReason string `json:"stopReason"`
				Usage      *struct {
					In  int64 `json:"inputTokens"`
					Out int64 `json:"outputTokens"`
				} `json:"usage"`
				Meta struct {
					Quota struct {
						Count *struct {
							In  int64 `json:"input_tokens"`
							Out int64 `json:"output_tokens"`
						} `json:"token_count"`
					} `json:"quota"`
				} `json:"_meta"`
			}
			_ = json.Unmarshal(m.Result, &r)
			w.stop, phase = r.StopReason, "after"
			switch {
			case r.Usage != nil:
				w.tokensIn, w.tokensOut = r.Usage.In, r.Usage.Out
			case r.Meta.Quota.Count != nil:
				w.tokensIn, w.tokensOut = r.Meta.Quota.Count.In, r.Meta.Quota.Count.Out
			}
		case "session/set_config_option":
			var r struct {
				ConfigOptions json.RawMessage `json:"configOptions"`
			}
			_ = json.Unmarshal(m.Result, &r)
			if len(r.ConfigOptions) > 0 {
				w.configSet = r.ConfigOptions
			}
		}
	}
	return w
}

// TestReplayRealAgentTranscripts replays each recorded transcript as the
// agent and drives the backend through it as the pool would: Start, the
// updates after session/new, one prompt, SetMode (or SetConfigOption of
// the mode option), Stop. The backend must show the recorded modes,
// current mode, config options and commands, the turn the recorded text
// and stop reason, and the mode change. goose is not recorded: it is no
// npm package (make test-real-acp installs only from npm).
func TestReplayRealAgentTranscripts(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "transcripts", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no transcripts in testdata/transcripts")
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".jsonl"), func(t *testing.T) {
			t.Parallel()
			replayTranscript(t, path)
		})
	}
}

func replayTranscript(t *testing.T, path string) {
	tr, err := agenttest.ReadTranscript(path)
	if err != nil {
		t.Fatal(err)
	}
	want := wantOf(t, tr)
	if (len(want.modes) == 0 && len(want.config) == 0) || len(want.commands) == 0 || want.prompt == "" || want.stop == "" {
		t.Fatalf("transcript lacks the recorded session: %+v", want)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	spec := agenttest.TranscriptSpec(tr.Header.Agent, abs)
	spec.Dir = gitRepo(t)
	outside, turn := &recorder{}, &recorder{}
	b, err := acp.New(acp.Config{Spec: spec, OnEvent: outside.add, StopGrace: 2 * time.Second, KillGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	info, err := b.Start(ctx, "")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var modes []string
	for _, m := range info.Modes {
		modes = append(modes, m.ID)
	}
	if !reflect.DeepEqual(modes, want.modes) || info.CurrentMode != want.currentMode {
		t.Errorf("modes %v (current %q), recorded %v (current %q)", modes, info.CurrentMode, want.modes, want.currentMode)
	}
	if len(want.config) > 0 {
		jsonEqual(t, "Info.ConfigOptions after Start", info.ConfigOptions, want.config)
	} else if len(info.ConfigOptions) > 0 {
		t.Errorf("config options %s, none recorded", info.ConfigOptions)
	}

	ev := outside.waitType(t, backends.EventCommands)
	var cu struct {
		Commands []struct {
			Name string `json:"name"`
		} `json:"availableCommands"`
	}
	if err := json.Unmarshal(ev.Data, &cu); err != nil {
		t.Fatalf("commands event %s: %v", ev.Data, err)
	}
	var names []string
	for _, c := range cu.Commands {
		names = append(names, c.Name)
	}
	if !reflect.DeepEqual(names, want.commands) {
		t.Errorf("commands event names %v, recorded %v", names, want.commands)
	}
	if cmds := b.Info().Commands; len(cmds) == 0 {
		t.Error("Info.Commands is empty after the commands event")
	}

	res, err := b.Prompt(ctx, backends.Prompt{Text: want.prompt, Turn: 1}, turn.add)
	if err != nil {
		t.Fatalf("Prompt: %v", err)
	}
	if got := strings.Join(turn.texts(backends.RoleAgent), ""); got != want.text {
		t.Errorf("turn text %q, recorded %q", got, want.text)
	}
	if string(res.StopReason) != want.stop {
		t.Errorf("stop reason %q, recorded %q", res.StopReason, want.stop)
	}
	if want.tokensIn > 0 || want.tokensOut > 0 {
		var u struct {
			In  int64 `json:"inputTokens"`
			Out int64 `json:"outputTokens"`
		}
		if err := json.Unmarshal(res.Usage, &u); err != nil || u.In != want.tokensIn || u.Out != want.tokensOut {
			t.Errorf("usage %s (%v); want %d input and %d output tokens as the answer recorded", res.Usage, err, want.tokensIn, want.tokensOut)
		}
	}

	if want.setMode != "" {
		if err := b.SetMode(ctx, want.setMode); err != nil {
			t.Fatalf("SetMode(%q): %v", want.setMode, err)
		}
		if got := b.Info().CurrentMode; got != want.setMode {
			t.Errorf("current mode after SetMode %q, want %q", got, want.setMode)
		}
		if len(want.configAfter) > 0 {
			// The update may come after the answer (codex): wait for it.
			waitConfig(t, "SetMode", b, want.configAfter)
		}
		for _, text := range want.textAfter {
			waitText(t, outside, text)
		}
	}

	if want.setOption != "" {
		if err := b.SetConfigOption(ctx, want.setOption, want.setValue); err != nil {
			t.Fatalf("SetConfigOption(%q, %q): %v", want.setOption, want.setValue, err)
		}
		if len(want.configSet) > 0 {
			waitConfig(t, "SetConfigOption", b, want.configSet)
		}
	}

	stop()
	exit := outside.waitType(t, backends.EventAgentExited)
	var ed backends.ExitData
	_ = json.Unmarshal(exit.Data, &ed)
	if strings.Contains(ed.StderrTail, "replay agent:") {
		t.Errorf("the replay did not reach the transcript's end: %s", ed.StderrTail)
	}
}

// waitConfig waits until the backend's config options are want after the
// call named what.
func waitConfig(t *testing.T, what string, b *acp.Backend, want json.RawMessage) {
	t.Helper()
	var w any
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := b.Info().ConfigOptions
		var g any
		if json.Unmarshal(got, &g) == nil && reflect.DeepEqual(g, w) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("config options after %s:\n got %s\nwant %s", what, got, want)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitText waits for an agent message chunk with text among r's events.
func waitText(t *testing.T, r *recorder, text string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if contains(r.texts(backends.RoleAgent), text) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("no agent message %q outside the turn; have %v", text, r.texts(backends.RoleAgent))
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, what string, got, want json.RawMessage) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Errorf("%s: %v (%s)", what, err, got)
		return
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: recorded: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, got, want)
	}
}
