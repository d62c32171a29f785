package pty_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/pty"
)

// readUntil reads a's stream until the bytes read contain want.
func readUntil(t *testing.T, a *pty.Attachment, want string) string {
	t.Helper()
	var sb strings.Builder
	timeout := time.After(10 * time.Second)
	for !strings.Contains(sb.String(), want) {
		select {
		case p, ok := <-a.Output():
			if !ok {
				t.Fatalf("stream of %q closed (%v) before %q; read %q", a.Viewer(), a.Err(), want, sb.String())
			}
			sb.Write(p)
		case <-timeout:
			t.Fatalf("stream of %q never carried %q; read %q", a.Viewer(), want, sb.String())
		}
	}
	return sb.String()
}

func TestAttachRoundTrip(t *testing.T) {
	h := newHarness(t, pty.Config{Spec: fakeSpec(t)})
	h.start(t, "")
	alice, err := h.b.Attach("alice")
	if err != nil {
		t.Fatalf("Attach(alice) = %v", err)
	}
	defer alice.Close()
	redraw := <-alice.Output()
	for _, want := range []string{"\x1b[2J", "fake-tui", "status: idle", "\x1b[2;3H", "\x1b[?2004h"} {
		if !strings.Contains(string(redraw), want) {
			t.Errorf("first chunk of Attach() = %q; want the redraw to contain %q", redraw, want)
		}
	}
	bob, err := h.b.Attach("bob")
	if err != nil {
		t.Fatalf("Attach(bob) = %v", err)
	}
	<-bob.Output()

	if err := h.b.Input("alice", []byte("abc")); !errors.Is(err, pty.ErrNotWriter) {
		t.Errorf("Input() before TakeInput = %v; want ErrNotWriter", err)
	}
	if err := h.b.TakeInput("alice"); err != nil {
		t.Fatalf("TakeInput(alice) = %v", err)
	}
	if err := h.b.TakeInput("bob"); !errors.Is(err, pty.ErrInputHeld) {
		t.Errorf("TakeInput(bob) while alice holds it = %v; want ErrInputHeld", err)
	}
	if err := h.b.Input("bob", []byte("x")); !errors.Is(err, pty.ErrNotWriter) {
		t.Errorf("Input(bob) = %v; want ErrNotWriter", err)
	}
	if _, err := h.b.Prompt(context.Background(), backends.Prompt{Text: "x"}, nil); !errors.Is(err, backends.ErrBusy) || !errors.Is(err, pty.ErrInputHeld) {
		t.Errorf("Prompt() while a viewer holds the input = %v; want ErrBusy and ErrInputHeld", err)
	}

	// Keystroke in, output out, to every viewer.
	if err := h.b.Input("alice", []byte("abcd\x7f")); err != nil {
		t.Fatalf("Input(alice) = %v", err)
	}
	readUntil(t, alice, "\b \b")
	waitScreen(t, h.b, "> abc")
	if err := h.b.Input("alice", []byte("\r")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, alice, "echo: abc")
	readUntil(t, bob, "echo: abc")

	// Resize: the program gets SIGWINCH and sees the new size.
	if err := h.b.Resize(100, 30); err != nil {
		t.Fatalf("Resize(100, 30) = %v", err)
	}
	// Wait for the whole redraw (the status bar follows the marker in one
	// write that the terminal may deliver in pieces), so none of it is
	// still arriving when the next turn takes its starting screen.
	got := readUntil(t, alice, "[resized 100x30]")
	if !strings.Contains(got[strings.Index(got, "[resized 100x30]"):], "status: idle") {
		readUntil(t, alice, "status: idle")
	}
	// And until the emulator shows it on the new last row, where the next
	// turn's starting screen must already have it.
	waitUntilScreen(t, h.b, "status bar on row 30", func(screen string) bool {
		rows := strings.Split(screen, "\n")
		return len(rows) >= 30 && strings.Contains(rows[29], "status: idle")
	})
	if snap := h.b.Snapshot(); snap.Cols != 100 || snap.Rows != 30 {
		t.Errorf("Snapshot() size = %dx%d; want 100x30", snap.Cols, snap.Rows)
	}
	if err := h.b.Resize(0, 30); !errors.Is(err, pty.ErrBadSize) {
		t.Errorf("Resize(0, 30) = %v; want ErrBadSize", err)
	}

	// Closing alice's stream gives up her input; bob may take it.
	if err := alice.Close(); err != nil {
		t.Fatal(err)
	}
	for range alice.Output() { // what was queued before the close
	}
	if alice.Err() != nil {
		t.Errorf("Err() after Close = %v; want nil", alice.Err())
	}
	if err := h.b.TakeInput("bob"); err != nil {
		t.Fatalf("TakeInput(bob) after alice left = %v", err)
	}
	h.b.ReleaseInput("bob")
	h.turn.reset()
	if res, err := h.prompt(t, "size"); err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt(size) after release = %+v, %v", res, err)
	}
	if got := h.turn.chunks(); len(got) != 1 || got[0] != "size 100x30" {
		t.Errorf("chunks = %q; want [\"size 100x30\"]", got)
	}

	// The stream ends when the program does.
	if err := h.b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range bob.Output() {
	}
	if !errors.Is(bob.Err(), backends.ErrExited) {
		t.Errorf("Err() after the exit = %v; want ErrExited", bob.Err())
	}
	if _, err := h.b.Attach("carol"); !errors.Is(err, backends.ErrExited) {
		t.Errorf("Attach() after the exit = %v; want ErrExited", err)
	}
}

func TestSlowViewerIsDropped(t *testing.T) {
	h := newHarness(t, pty.Config{Spec: fakeSpec(t), ViewerBuffer: 2, OutputLimit: 1024})
	h.start(t, "")
	slow, err := h.b.Attach("slow")
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	const flood = 2 << 20
	res, err := h.prompt(t, "flood 2097152")
	if err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt(flood) = %+v, %v; want end_turn: a viewer that does not read must not block the program", res, err)
	}
	n := 0
	for range slow.Output() {
		n++
	}
	if n > 3 || !errors.Is(slow.Err(), pty.ErrSlowViewer) {
		t.Errorf("slow viewer got %d chunks, Err() = %v; want at most 3 and ErrSlowViewer", n, slow.Err())
	}
	// pty.output is rate-bounded: at most OutputLimit bytes per event,
	// the rest counted as dropped.
	raw, dropped := h.turn.output()
	for _, e := range h.turn.all() {
		if e.Type == backends.EventPTYOutput && len(e.Data) > 2*1024 {
			t.Errorf("pty.output event of %d bytes of JSON; want at most OutputLimit (1024) raw bytes", len(e.Data))
		}
	}
	if len(raw)+dropped < flood || dropped == 0 {
		t.Errorf("pty.output carried %d bytes and dropped %d; want the %d-byte flood accounted for, mostly dropped", len(raw), dropped, flood)
	}
	if got := h.turn.chunks(); len(got) != 1 || !strings.HasSuffix(got[0], "flooded") {
		t.Errorf("chunks = %q; want the screen's end of the flood", got)
	}
}

// TestAttachDuringStart answers a first-run question through the attach
// API while Start waits for the ready prompt.
func TestAttachDuringStart(t *testing.T) {
	h := newHarness(t, pty.Config{Spec: fakeSpec(t, envAsk+"=1")})
	started := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := h.b.Start(ctx, "")
		started <- err
	}()
	var a *pty.Attachment
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if a, err = h.b.Attach("alice"); err == nil {
			break
		}
		if !errors.Is(err, backends.ErrNotStarted) || time.Now().After(deadline) {
			t.Fatalf("Attach() during Start = %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer a.Close()
	readUntil(t, a, "Trust this folder?")
	select {
	case err := <-started:
		t.Fatalf("Start() returned %v before the question was answered", err)
	default:
	}
	if err := h.b.TakeInput("alice"); err != nil {
		t.Fatalf("TakeInput() during Start = %v", err)
	}
	if err := h.b.Input("alice", []byte("y")); err != nil {
		t.Fatalf("Input() during Start = %v", err)
	}
	h.b.ReleaseInput("alice")
	if err := <-started; err != nil {
		t.Fatalf("Start() after the answer = %v", err)
	}
	readUntil(t, a, "status: idle")
}
