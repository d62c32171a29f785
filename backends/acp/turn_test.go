package acp_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

func TestFullTurnEventsInOrder(t *testing.T) {
	s := agenttest.Script{
		Modes:           []agenttest.Mode{{ID: "ask", Name: "Ask"}, {ID: "code", Name: "Code"}},
		BeforeNewAnswer: []agenttest.Step{{Update: json.RawMessage(`{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"init","description":"Init"}]}`)}},
		Turns: []agenttest.Turn{{
			Echo: true,
			Steps: []agenttest.Step{
				{Thought: "thinking"},
				{ToolCall: &agenttest.ToolCall{ID: "t1", Title: "Edit", Kind: "edit", Status: "pending"}},
				{ToolCall: &agenttest.ToolCall{ID: "t1", Title: "Edit again", Kind: "edit", Status: "in_progress"}},
				{ToolUpdate: &agenttest.ToolCall{ID: "t1", Status: "completed", Text: "done"}},
				{Update: json.RawMessage(`{"sessionUpdate":"plan","entries":[{"content":"a","priority":"high","status":"pending"}]}`)},
				{Update: json.RawMessage(`{"sessionUpdate":"future_kind_update","foo":1}`)},
				{Chunk: "final"},
			},
			After: []agenttest.Step{{Chunk: "late"}},
		}},
	}
	h := newBackend(t, s, acp.Config{})
	info := h.start(t, "")
	if info.AgentName != "fake-agent" || info.ProtocolVersion != 1 || info.AgentSessionID == "" || info.PID == 0 {
		t.Fatalf("Info = %+v", info)
	}
	if info.CurrentMode != "ask" || len(info.Modes) != 2 {
		t.Errorf("modes = %q %v; want ask and 2 modes", info.CurrentMode, info.Modes)
	}
	// The update sent before the session/new answer is kept.
	h.outside.waitType(t, backends.EventCommands)
	if !strings.Contains(string(h.b.Info().Commands), "init") {
		t.Errorf("Info().Commands = %s; want the init command", h.b.Info().Commands)
	}
	res, err := h.prompt(t, "hello")
	if err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt = %+v, %v; want end_turn", res, err)
	}
	got := strings.Join(h.turn.types(), ",")
	want := "message.chunk,message.chunk,tool.call,tool.update,tool.update,plan,update.unknown,message.chunk"
	if got != want {
		t.Fatalf("turn events = %s; want %s", got, want)
	}
	for _, e := range h.turn.all() {
		if e.Turn != 1 || e.Agent != "fake" {
			t.Errorf("event %s has turn %d agent %q; want 1 and fake", e.Type, e.Turn, e.Agent)
		}
	}
	if tx := h.turn.texts(backends.RoleAgent); len(tx) != 2 || tx[0] != "echo: hello" || tx[1] != "final" {
		t.Errorf("agent texts = %q", tx)
	}
	// The update sent after the answer reaches OnEvent, not the turn.
	h.outside.waitType(t, backends.EventMessageChunk)
	if tx := h.outside.texts(backends.RoleAgent); len(tx) != 1 || tx[0] != "late" {
		t.Errorf("late texts = %q; want [late]", tx)
	}
	// A second turn on the warm backend. The script repeats itself, tool
	// call id t1 included: in a new turn it is a new call again.
	h.turn = &recorder{}
	if res, err := h.prompt(t, "again"); err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("second Prompt = %+v, %v", res, err)
	}
	if got := strings.Join(h.turn.types(), ","); got != want {
		t.Fatalf("second turn events = %s; want %s", got, want)
	}
}

func TestModeAndConfig(t *testing.T) {
	h := newBackend(t, agenttest.Script{
		Modes: []agenttest.Mode{{ID: "ask", Name: "Ask"}, {ID: "code", Name: "Code"}},
		ConfigOptions: json.RawMessage(`[{"id":"model","name":"Model","category":"model","type":"select","currentValue":"slow",
			"options":[{"group":"g","name":"Group","options":[{"value":"slow","name":"Slow"},{"value":"fast","name":"Fast"}]}]},
			{"id":"think","name":"Think","type":"boolean","currentValue":false}]`),
	}, acp.Config{})
	h.start(t, "")
	if err := h.b.SetMode(context.Background(), "code"); err != nil {
		t.Fatalf("SetMode: %v", err)
	}
	if m := h.b.Info().CurrentMode; m != "code" {
		t.Errorf("CurrentMode = %q; want code", m)
	}
	if err := h.b.SetConfigOption(context.Background(), "model", "fast"); err != nil {
		t.Fatalf("SetConfigOption(model, fast): %v", err)
	}
	// A boolean option is sent as a boolean (the fake refuses a string).
	if err := h.b.SetConfigOption(context.Background(), "think", "true"); err != nil {
		t.Fatalf("SetConfigOption(think, true): %v", err)
	}
	// The answer's whole option set becomes the backend's.
	adv := backends.AdvertisedFrom(h.b.Info())
	if m, _ := adv.Option("model"); m.Current != "fast" || len(m.Choices) != 2 || m.Choices[0].Group != "Group" {
		t.Errorf("model after the set = %+v; want fast of 2 grouped choices", m)
	}
	if b, _ := adv.Option("think"); b.Type != backends.OptionBoolean || b.Current != "true" {
		t.Errorf("think after the set = %+v; want boolean true", b)
	}
	if err := h.b.SetConfigOption(context.Background(), "model", "huge"); err == nil {
		t.Errorf("SetConfigOption(model, huge) error = nil; want the agent's refusal")
	}
}

func TestBusyRefused(t *testing.T) {
	h := newBackend(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "working"}, {WaitCancel: true}}}}}, acp.Config{})
	h.start(t, "")
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = h.prompt(t, "long")
	}()
	h.turn.waitType(t, backends.EventMessageChunk)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := h.b.Prompt(ctx, backends.Prompt{Text: "x"}, nil); !errors.Is(err, backends.ErrBusy) {
		t.Fatalf("second Prompt error = %v; want ErrBusy", err)
	}
	if err := h.b.Cancel(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-done
}

func TestCancelMidTurn(t *testing.T) {
	h := newBackend(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "working"}, {WaitCancel: true}, {Chunk: "never"}}}, {Echo: true}}}, acp.Config{})
	h.start(t, "")
	type out struct {
		res backends.TurnResult
		err error
	}
	ch := make(chan out, 1)
	go func() { r, err := h.prompt(t, "go"); ch <- out{r, err} }()
	h.turn.waitType(t, backends.EventMessageChunk)
	if err := h.b.Cancel(context.Background()); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	o := <-ch
	if o.err != nil || o.res.StopReason != backends.StopCancelled {
		t.Fatalf("Prompt = %+v, %v; want cancelled", o.res, o.err)
	}
	if contains(h.turn.texts(backends.RoleAgent), "never") {
		t.Error("steps after the cancel ran")
	}
	// The backend stays warm.
	if _, err := h.prompt(t, "next"); err != nil {
		t.Fatalf("Prompt after cancel: %v", err)
	}
}

func TestCancelIgnoredStopsAgent(t *testing.T) {
	h := newBackend(t, agenttest.Script{Turns: []agenttest.Turn{{IgnoreCancel: true, Steps: []agenttest.Step{{WaitCancel: true}}}}},
		acp.Config{CancelGrace: 200 * time.Millisecond})
	h.start(t, "")
	ch := make(chan error, 1)
	go func() { _, err := h.prompt(t, "go"); ch <- err }()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := h.b.Cancel(context.Background()); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Cancel took %v; want about the 200ms grace", d)
	}
	err := <-ch
	if !errors.Is(err, acp.ErrIgnoredCancel) {
		t.Fatalf("Prompt error = %v; want ErrIgnoredCancel", err)
	}
	select {
	case <-h.b.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("backend not done after ignoring cancel")
	}
	if backends.GroupAlive(h.b.Info().PID) {
		t.Fatal("agent group alive after ignoring cancel")
	}
}

func TestTurnDeadline(t *testing.T) {
	h := newBackend(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{WaitCancel: true}}}, {Echo: true}}},
		acp.Config{Spec: backends.Spec{TurnTimeout: 200 * time.Millisecond}})
	h.start(t, "")
	res, err := h.prompt(t, "silent")
	if !errors.Is(err, acp.ErrTurnTimeout) || res.StopReason != backends.StopTimeout {
		t.Fatalf("Prompt = %+v, %v; want timeout", res, err)
	}
	if _, err := h.prompt(t, "again"); err != nil {
		t.Fatalf("backend should stay usable after a timed-out turn: %v", err)
	}
}

func TestPromptContextCancelSendsSessionCancel(t *testing.T) {
	h := newBackend(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{WaitCancel: true}}}}}, acp.Config{})
	h.start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := h.b.Prompt(ctx, backends.Prompt{Text: "x"}, nil)
	if err != nil || res.StopReason != backends.StopCancelled {
		t.Fatalf("Prompt = %+v, %v; want the agent's own cancelled answer", res, err)
	}
}

func TestCrashMidTurn(t *testing.T) {
	code := 3
	h := newBackend(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "starting"}, {Stderr: "panic: model exploded"}, {Crash: &code}}}}}, acp.Config{})
	h.start(t, "")
	res, err := h.prompt(t, "go")
	if err == nil || res.StopReason != backends.StopError {
		t.Fatalf("Prompt = %+v, %v; want an error", res, err)
	}
	for _, want := range []string{"exit status 3", "model exploded"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Prompt error = %q; want it to contain %q", err, want)
		}
	}
	var ee *backends.ExitError
	if !errors.As(err, &ee) || ee.Expected {
		t.Errorf("Prompt error %v does not carry an unexpected ExitError", err)
	}
	ev := h.outside.waitType(t, backends.EventAgentExited)
	var xd backends.ExitData
	_ = json.Unmarshal(ev.Data, &xd)
	if xd.Expected || !strings.Contains(xd.StderrTail, "model exploded") {
		t.Errorf("agent.exited data = %+v", xd)
	}
	if _, err := h.prompt(t, "again"); !errors.Is(err, backends.ErrExited) {
		t.Errorf("Prompt after crash error = %v; want ErrExited", err)
	}
}

func TestExitBeforeHandshake(t *testing.T) {
	code := 9
	h := newBackend(t, agenttest.Script{ExitBeforeHandshake: &code}, acp.Config{})
	_, err := h.b.Start(context.Background(), "")
	if err == nil || !strings.Contains(err.Error(), "exit status 9") || !strings.Contains(err.Error(), "exiting before the handshake") {
		t.Fatalf("Start error = %v; want exit status 9 and the stderr line", err)
	}
	<-h.b.Done()
}

func TestHangingHandshakeBoundedByContext(t *testing.T) {
	h := newBackend(t, agenttest.Script{HangOnInitialize: true}, acp.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := h.b.Start(ctx, "")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start error = %v; want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Start returned after %v", d)
	}
	<-h.b.Done()
}

func TestWrongProtocolVersion(t *testing.T) {
	h := newBackend(t, agenttest.Script{ProtocolVersion: 2}, acp.Config{})
	_, err := h.b.Start(context.Background(), "")
	if !errors.Is(err, acp.ErrProtocol) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("Start error = %v; want a protocol version error", err)
	}
}
