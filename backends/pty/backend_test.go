package pty_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/pty"
)

func TestFakeTUITwoTurns(t *testing.T) {
	h := newHarness(t, pty.Config{Spec: fakeSpec(t)})
	info := h.start(t, "")
	if info.Kind != backends.KindPTY || info.PID <= 0 || info.PGID != info.PID || info.StartTicks == 0 {
		t.Fatalf("Start() info = %+v; want kind pty, pid = pgid > 0, start ticks", info)
	}
	screen := h.b.Screen()
	for _, want := range []string{"fake-tui", "status: idle", "> "} {
		if !strings.Contains(screen, want) {
			t.Fatalf("Screen() after Start = %q; want it to contain %q", screen, want)
		}
	}
	for i, text := range []string{"hello world", "second turn"} {
		h.turn.reset()
		res, err := h.prompt(t, text)
		if err != nil || res.StopReason != backends.StopEndTurn {
			t.Fatalf("Prompt(%q) = %+v, %v; want end_turn", text, res, err)
		}
		if res.Duration < 150*time.Millisecond {
			t.Errorf("Prompt(%q) took %v; the fake works 200ms per turn, so the turn ended early", text, res.Duration)
		}
		want := "echo: " + text
		if got := h.turn.chunks(); len(got) != 1 || got[0] != want {
			t.Errorf("turn %d message chunks = %q; want exactly [%q]", i+1, got, want)
		}
		raw, _ := h.turn.output()
		if !strings.Contains(raw, want) || !strings.Contains(raw, "thinking") {
			t.Errorf("turn %d pty.output = %q; want the raw spinner and %q", i+1, raw, want)
		}
		evs := h.turn.all()
		last := evs[len(evs)-1]
		if last.Type != backends.EventPTYScreen {
			t.Fatalf("turn %d last event = %s; want pty.screen (all: %v)", i+1, last.Type, h.turn.types())
		}
		var snap pty.ScreenData
		if err := json.Unmarshal(last.Data, &snap); err != nil {
			t.Fatal(err)
		}
		if snap.Cols != 80 || snap.Rows != 24 || !strings.Contains(snap.Text, want) || !snap.Cursor.Visible {
			t.Errorf("turn %d pty.screen = %+v; want 80x24 with %q and a visible cursor", i+1, snap, want)
		}
		if lines := strings.Split(snap.Text, "\n"); lines[snap.Cursor.Y] != "> " || snap.Cursor.X != 2 {
			t.Errorf("turn %d cursor = %+v on row %q; want after the prompt", i+1, snap.Cursor, lines[snap.Cursor.Y])
		}
	}
}

func TestPromptRefusedWhileBusy(t *testing.T) {
	h := newHarness(t, pty.Config{Spec: fakeSpec(t)})
	h.start(t, "")
	type result struct {
		res backends.TurnResult
		err error
	}
	ch := make(chan result, 1)
	go func() {
		res, err := h.prompt(t, "hang")
		ch <- result{res, err}
	}()
	waitScreen(t, h.b, "thinking")
	if _, err := h.b.Prompt(context.Background(), backends.Prompt{Text: "again"}, nil); !errors.Is(err, backends.ErrBusy) {
		t.Errorf("second Prompt() error = %v; want ErrBusy", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.b.Cancel(ctx); err != nil {
		t.Fatalf("Cancel() = %v", err)
	}
	r := <-ch
	if r.err != nil || r.res.StopReason != backends.StopCancelled {
		t.Fatalf("cancelled Prompt() = %+v, %v; want cancelled", r.res, r.err)
	}
	if got := h.turn.chunks(); len(got) != 1 || got[0] != "^C interrupted" {
		t.Errorf("cancelled turn chunks = %q; want [\"^C interrupted\"]", got)
	}
	if err := h.b.Cancel(ctx); err != nil {
		t.Errorf("Cancel() without a turn = %v; want nil", err)
	}
	h.turn.reset()
	if res, err := h.prompt(t, "after"); err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt() after cancel = %+v, %v; want end_turn", res, err)
	}
	if got := h.turn.chunks(); len(got) != 1 || got[0] != "echo: after" {
		t.Errorf("chunks after cancel = %q; want [\"echo: after\"]", got)
	}
}

func TestTurnEndsByCancelAndDeadline(t *testing.T) {
	tests := []struct {
		name       string
		text       string
		timeout    time.Duration // Spec.TurnTimeout
		ctxTimeout time.Duration // the Prompt's context
		wantStop   backends.StopReason
		wantErr    error
		grace      time.Duration // CancelGrace
		wantExit   bool
	}{
		{name: "deadline", text: "hang", timeout: 300 * time.Millisecond, ctxTimeout: 20 * time.Second, grace: 5 * time.Second, wantStop: backends.StopTimeout, wantErr: pty.ErrTurnTimeout},
		{name: "context", text: "hang", ctxTimeout: 300 * time.Millisecond, grace: 5 * time.Second, wantStop: backends.StopCancelled},
		{name: "ignored", text: "deaf", timeout: 300 * time.Millisecond, ctxTimeout: 20 * time.Second, grace: 400 * time.Millisecond, wantStop: backends.StopTimeout, wantErr: pty.ErrIgnoredCancel, wantExit: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := fakeSpec(t)
			spec.TurnTimeout = tt.timeout
			h := newHarness(t, pty.Config{Spec: spec, CancelGrace: tt.grace})
			h.start(t, "")
			ctx, cancel := context.WithTimeout(context.Background(), tt.ctxTimeout)
			defer cancel()
			res, err := h.b.Prompt(ctx, backends.Prompt{Text: tt.text}, h.turn.add)
			if res.StopReason != tt.wantStop || (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("Prompt(%q) = %+v, %v; want %s, %v", tt.text, res, err, tt.wantStop, tt.wantErr)
			}
			select {
			case <-h.b.Done():
				if !tt.wantExit {
					t.Fatalf("backend exited: %v", h.b.Err())
				}
				// The backend killed the program itself: not a crash.
				if err := h.b.Err(); err != nil {
					t.Errorf("Err() = %v; want nil (the backend's own kill is an expected exit)", err)
				}
				ev := h.outside.waitType(t, backends.EventAgentExited)
				var data struct {
					backends.ExitData
					Reason string `json:"reason"`
				}
				_ = json.Unmarshal(ev.Data, &data)
				if !data.Expected || !strings.Contains(data.Reason, pty.ErrIgnoredCancel.Error()) {
					t.Errorf("agent.exited = %+v; want expected, with the reason %q", data, pty.ErrIgnoredCancel)
				}
				return
			default:
				if tt.wantExit {
					t.Fatalf("backend still running after the program ignored the cancel keys")
				}
			}
			if res, err := h.prompt(t, "size"); err != nil || res.StopReason != backends.StopEndTurn {
				t.Errorf("Prompt() after %s = %+v, %v; want end_turn", tt.name, res, err)
			}
		})
	}
}

func TestQuietWindowWithoutPattern(t *testing.T) {
	spec := fakeSpec(t, envDelay+"=1000")
	spec.PTY.ReadyPattern = ""
	spec.PTY.QuietWindow = 500 * time.Millisecond
	h := newHarness(t, pty.Config{Spec: spec})
	h.start(t, "")
	// A quiet window also ends the start early if the program is slow to
	// draw: wait for it as the pool would not, to test the turn alone.
	waitScreen(t, h.b, "status: idle")
	res, err := h.prompt(t, "quietly")
	if err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt() = %+v, %v; want end_turn", res, err)
	}
	// The spinner keeps the output busy for 1s: a turn that ended at
	// the first 500ms pause would miss the answer.
	if got := h.turn.chunks(); len(got) != 1 || got[0] != "echo: quietly" {
		t.Errorf("chunks = %q; want [\"echo: quietly\"]", got)
	}
}

func TestCrashDuringTurn(t *testing.T) {
	h := newHarness(t, pty.Config{Spec: fakeSpec(t)})
	h.start(t, "")
	res, err := h.prompt(t, "crash")
	if res.StopReason != backends.StopError || err == nil {
		t.Fatalf("Prompt(crash) = %+v, %v; want an error", res, err)
	}
	for _, want := range []string{"exit status 3", "fatal: crashed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Prompt(crash) error = %v; want it to contain %q", err, want)
		}
	}
	<-h.b.Done()
	var ee *backends.ExitError
	if !errors.As(h.b.Err(), &ee) || ee.Expected {
		t.Errorf("Err() = %v; want an unexpected *backends.ExitError", h.b.Err())
	}
	ev := h.outside.waitType(t, backends.EventAgentExited)
	var data backends.ExitData
	_ = json.Unmarshal(ev.Data, &data)
	if data.Expected || data.PID != h.b.Info().PID || !strings.Contains(data.StderrTail, "fatal: crashed") {
		t.Errorf("agent.exited = %+v; want unexpected, pid %d, the screen's last lines", data, h.b.Info().PID)
	}
	if _, err := h.prompt(t, "again"); !errors.Is(err, backends.ErrExited) {
		t.Errorf("Prompt() after the crash error = %v; want ErrExited", err)
	}
}

func TestStartFailures(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		path    string
		pattern string
		timeout time.Duration
		want    []string
	}{
		{name: "exits before ready", env: []string{envExitAtStart + "=1"}, want: []string{"exited before it was ready", "exit status 2", "boom: cannot start"}},
		{name: "never ready", pattern: `^never$`, timeout: 500 * time.Millisecond, want: []string{"not ready", "deadline exceeded"}},
		{name: "missing program", path: "/nonexistent/agent", want: []string{"/nonexistent/agent"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := fakeSpec(t, tt.env...)
			if tt.path != "" {
				spec.Path = tt.path
			}
			if tt.pattern != "" {
				spec.PTY.ReadyPattern = tt.pattern
			}
			h := newHarness(t, pty.Config{Spec: spec})
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_, err := h.b.Start(ctx, "")
			if err == nil {
				t.Fatal("Start() = nil; want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Start() error = %v; want it to contain %q", err, w)
				}
			}
			select {
			case <-h.b.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("Done() not closed after a failed Start")
			}
			if h.b.Err() == nil {
				t.Error("Err() = nil after a failed Start")
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	good := fakeSpec(t)
	tests := []struct {
		name string
		edit func(*backends.Spec)
	}{
		{"acp kind", func(s *backends.Spec) { s.Kind = backends.KindACP }},
		{"no dir", func(s *backends.Spec) { s.Dir = "" }},
		{"relative path", func(s *backends.Spec) { s.Path = "agent" }},
		{"bad pattern", func(s *backends.Spec) { s.PTY.ReadyPattern = "(" }},
		{"too wide", func(s *backends.Spec) { s.PTY.Cols = pty.MaxCols + 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := good
			tt.edit(&spec)
			if _, err := pty.New(pty.Config{Spec: spec}); err == nil {
				t.Errorf("New(%+v) = nil error; want one", spec)
			}
		})
	}
}

func TestResume(t *testing.T) {
	tests := []struct {
		name        string
		resumeArgs  []string
		wantResumed bool
		wantLost    bool
		wantScreen  string
	}{
		{name: "with resume args", resumeArgs: []string{"--continue"}, wantResumed: true, wantScreen: "args: --continue"},
		{name: "without", wantLost: true, wantScreen: "args: --fresh"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := fakeSpec(t)
			spec.Args = []string{"--fresh"}
			spec.PTY.ResumeArgs = tt.resumeArgs
			h := newHarness(t, pty.Config{Spec: spec})
			info := h.start(t, "previous")
			if info.Resumed != tt.wantResumed || info.ContextLost != tt.wantLost {
				t.Errorf("Start(resume) info = %+v; want resumed %v, context lost %v", info, tt.wantResumed, tt.wantLost)
			}
			if tt.wantResumed && info.AgentSessionID == "" {
				t.Errorf("Start(resume) AgentSessionID empty; want a resume token")
			}
			if s := h.b.Screen(); !strings.Contains(s, tt.wantScreen) {
				t.Errorf("Screen() = %q; want %q", s, tt.wantScreen)
			}
			if tt.wantLost {
				h.outside.waitType(t, backends.EventAgentContextLost)
			}
		})
	}
}

func TestUnsupported(t *testing.T) {
	b, err := pty.New(pty.Config{Spec: fakeSpec(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.SetMode(ctx, "plan"); !errors.Is(err, backends.ErrUnsupported) {
		t.Errorf("SetMode() = %v; want ErrUnsupported", err)
	}
	if err := b.SetConfigOption(ctx, "model", "x"); !errors.Is(err, backends.ErrUnsupported) {
		t.Errorf("SetConfigOption() = %v; want ErrUnsupported", err)
	}
	if _, err := b.Prompt(ctx, backends.Prompt{Text: "x"}, nil); !errors.Is(err, backends.ErrNotStarted) {
		t.Errorf("Prompt() before Start = %v; want ErrNotStarted", err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Errorf("Stop() before Start = %v", err)
	}
	<-b.Done()
	if _, err := b.Start(ctx, ""); !errors.Is(err, backends.ErrExited) {
		t.Errorf("Start() after Stop = %v; want ErrExited", err)
	}
}

// TestBusyPattern drives a program whose ready pattern matches while it
// works too (like claude, whose prompt box never leaves the screen): the
// busy pattern decides, or, if the program never shows it, a quiet window.
func TestBusyPattern(t *testing.T) {
	tests := []struct {
		name    string
		busy    string
		quiet   time.Duration
		minTurn time.Duration
	}{
		{name: "busy indicator seen", busy: `status: working`, quiet: time.Hour, minTurn: 150 * time.Millisecond},
		{name: "never busy: ready and quiet", busy: `never shown`, quiet: 300 * time.Millisecond, minTurn: 450 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := fakeSpec(t)
			spec.PTY.ReadyPattern = `^ status: `
			spec.PTY.QuietWindow = tt.quiet
			h := newHarness(t, pty.Config{Spec: spec, BusyPattern: tt.busy})
			h.start(t, "")
			waitScreen(t, h.b, "> ")
			for _, text := range []string{"one", "two"} {
				h.turn.reset()
				res, err := h.prompt(t, text)
				if err != nil || res.StopReason != backends.StopEndTurn {
					t.Fatalf("Prompt(%q) = %+v, %v; want end_turn", text, res, err)
				}
				if res.Duration < tt.minTurn {
					t.Errorf("Prompt(%q) took %v; want at least %v (ended before the answer)", text, res.Duration, tt.minTurn)
				}
				if got := h.turn.chunks(); len(got) != 1 || got[0] != "echo: "+text {
					t.Errorf("Prompt(%q) chunks = %q; want [%q]", text, got, "echo: "+text)
				}
			}
		})
	}
	if _, err := pty.New(pty.Config{Spec: func() backends.Spec { s := fakeSpec(t); s.PTY.ReadyPattern = ""; return s }(), BusyPattern: "x"}); err == nil {
		t.Error("New() with a busy pattern and no ready pattern = nil error; want one")
	}
}
