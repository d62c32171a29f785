package acpfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// run creates a terminal for req, waits for it to exit and returns its
// output and status.
func run(t *testing.T, terms *Terminals, req TerminalRequest) (string, TerminalOutput, ExitStatus) {
	t.Helper()
	id, err := terms.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create(%+v) error = %v", req, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := terms.WaitForExit(ctx, id)
	if err != nil {
		t.Fatalf("WaitForExit(%q) error = %v", id, err)
	}
	out, err := terms.Output(id)
	if err != nil {
		t.Fatalf("Output(%q) error = %v", id, err)
	}
	return id, out, st
}

func TestTerminalRuns(t *testing.T) {
	terms, root, _ := newTestTerminals(t, TerminalsConfig{Env: []string{"PATH=/usr/bin:/bin", "AP_BASE=base"}})
	if err := os.MkdirAll(filepath.Join(root, "sub", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sub", "hello.sh"), []byte("#!/bin/sh\necho \"hello $1 from $(pwd)\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sub", "bin", "mytool"), []byte("#!/bin/sh\necho \"mytool $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(root, "sub")
	tests := []struct {
		name     string
		req      TerminalRequest
		wantOut  string
		wantCode int
	}{
		{"shell line", TerminalRequest{Command: "echo hello; echo err >&2"}, "hello\nerr\n", 0},
		{"shell line exit code", TerminalRequest{Command: "echo x; exit 7"}, "x\n", 7},
		{"program with args", TerminalRequest{Command: "printf", Args: []string{"%s-%s", "a b", "c"}}, "a b-c", 0},
		{"args are not shell", TerminalRequest{Command: "echo", Args: []string{"$HOME", ";", "|"}}, "$HOME ; |\n", 0},
		{"exit code", TerminalRequest{Command: "sh", Args: []string{"-c", "exit 3"}}, "", 3},
		{"plain program, default cwd", TerminalRequest{Command: "pwd"}, root + "\n", 0},
		{"cwd", TerminalRequest{Command: "pwd", Cwd: sub}, sub + "\n", 0},
		{"cwd with dotdot", TerminalRequest{Command: "pwd", Cwd: sub + "/bin/.."}, sub + "\n", 0},
		{"env addition", TerminalRequest{Command: "echo $AP_FOO", Env: []EnvVar{{"AP_FOO", "bar baz"}}}, "bar baz\n", 0},
		{"env base", TerminalRequest{Command: "echo $AP_BASE"}, "base\n", 0},
		{"env override", TerminalRequest{Command: "echo $AP_BASE", Env: []EnvVar{{"AP_BASE", "over"}}}, "over\n", 0},
		{"relative program runs in cwd", TerminalRequest{Command: "./hello.sh", Args: []string{"x"}, Cwd: sub}, "hello x from " + sub + "\n", 0},
		{"PATH from env", TerminalRequest{Command: "mytool", Args: []string{"1"}, Env: []EnvVar{{"PATH", sub + "/bin"}}}, "mytool 1\n", 0},
		{"no stdin", TerminalRequest{Command: "cat; echo done"}, "done\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, out, st := run(t, terms, tt.req)
			if out.Output != tt.wantOut || out.Truncated {
				t.Errorf("Output of %+v = %q (truncated %v); want %q", tt.req, out.Output, out.Truncated, tt.wantOut)
			}
			want := ExitStatus{ExitCode: intp(tt.wantCode)}
			if diff := cmp.Diff(want, st); diff != "" {
				t.Errorf("WaitForExit of %+v (-want +got):\n%s", tt.req, diff)
			}
			if diff := cmp.Diff(&want, out.Exit); diff != "" {
				t.Errorf("Output(...).Exit of %+v (-want +got):\n%s", tt.req, diff)
			}
		})
	}
}

func TestTerminalCreateErrors(t *testing.T) {
	terms, root, log := newTestTerminals(t, TerminalsConfig{})
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		req     TerminalRequest
		wantErr error
	}{
		{"cwd outside", TerminalRequest{Command: "pwd", Cwd: outside}, ErrOutsideRoot},
		{"cwd sibling prefix", TerminalRequest{Command: "pwd", Cwd: root + "-evil"}, ErrOutsideRoot},
		{"cwd symlink out", TerminalRequest{Command: "pwd", Cwd: root + "/out"}, ErrOutsideRoot},
		{"cwd relative", TerminalRequest{Command: "pwd", Cwd: "sub"}, ErrRelativePath},
		{"cwd file", TerminalRequest{Command: "pwd", Cwd: root + "/file"}, ErrNotDirectory},
		{"cwd missing", TerminalRequest{Command: "pwd", Cwd: root + "/missing"}, fs.ErrNotExist},
		{"unknown program", TerminalRequest{Command: "no-such-program-acpfs", Args: []string{"x"}}, fs.ErrNotExist},
		{"unknown program alone", TerminalRequest{Command: "no-such-program-acpfs"}, fs.ErrNotExist},
		{"missing relative program", TerminalRequest{Command: "./nope", Args: []string{"x"}}, fs.ErrNotExist},
		{"empty command", TerminalRequest{}, nil},
		{"nul in command", TerminalRequest{Command: "echo\x00"}, ErrNulByte},
		{"nul in argument", TerminalRequest{Command: "echo", Args: []string{"a\x00"}}, ErrNulByte},
		{"bad env name", TerminalRequest{Command: "env", Env: []EnvVar{{"A=B", "c"}}}, nil},
		{"empty env name", TerminalRequest{Command: "env", Env: []EnvVar{{"", "c"}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := terms.Create(context.Background(), tt.req)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("Create(%+v) = %q, %v; want error %v", tt.req, id, err, tt.wantErr)
			}
		})
	}
	// Failed creations hold no slot and emit nothing.
	for range DefaultMaxRunning {
		run(t, terms, TerminalRequest{Command: "true"})
	}
	log.mu.Lock()
	n := len(log.evs)
	log.mu.Unlock()
	if n != 2*DefaultMaxRunning {
		t.Errorf("%d events after %d runs; want %d", n, DefaultMaxRunning, 2*DefaultMaxRunning)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := terms.Create(ctx, TerminalRequest{Command: "true"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Create(cancelled ctx) error = %v; want context.Canceled", err)
	}
}

func TestTerminalOutputTruncation(t *testing.T) {
	// x € y: the euro sign is 3 bytes, e2 82 ac.
	const line = `printf 'x\342\202\254y'`
	tests := []struct {
		name          string
		limit         *int
		cap           int
		want          string
		wantTruncated bool
	}{
		{"no limit", nil, 0, "x€y", false},
		{"limit at size", intp(5), 0, "x€y", false},
		{"limit over size", intp(500), 0, "x€y", false},
		{"cut before the char", intp(4), 0, "€y", true},
		{"cut inside the char", intp(3), 0, "y", true},
		{"cut at its last byte", intp(2), 0, "y", true},
		{"one byte", intp(1), 0, "y", true},
		{"zero", intp(0), 0, "", true},
		{"negative means the cap", intp(-1), 4, "€y", true},
		{"server cap wins", intp(100), 4, "€y", true},
		{"server cap inside the char", nil, 3, "y", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			terms, _, _ := newTestTerminals(t, TerminalsConfig{OutputCap: tt.cap})
			_, out, _ := run(t, terms, TerminalRequest{Command: line, OutputByteLimit: tt.limit})
			if out.Output != tt.want || out.Truncated != tt.wantTruncated {
				t.Errorf("Output(limit %v, cap %d) = %q, truncated %v; want %q, %v", deref(tt.limit), tt.cap, out.Output, out.Truncated, tt.want, tt.wantTruncated)
			}
		})
	}
}

func TestTerminalLargeOutput(t *testing.T) {
	terms, _, log := newTestTerminals(t, TerminalsConfig{})
	id, out, _ := run(t, terms, TerminalRequest{
		Command:         `head -c 300000 /dev/zero | tr '\0' a; printf '\342\202\254'`,
		OutputByteLimit: intp(10),
	})
	if out.Output != "aaaaaaa€" || !out.Truncated {
		t.Errorf("Output = %q, truncated %v; want \"aaaaaaa€\", true", out.Output, out.Truncated)
	}
	evs := log.of(id)
	if len(evs) != 2 || evs[1].Bytes != 300003 {
		t.Errorf("events of %s = %+v; want an exit event with 300003 bytes", id, evs)
	}
}

func TestTerminalEvents(t *testing.T) {
	terms, root, log := newTestTerminals(t, TerminalsConfig{})
	id, _, _ := run(t, terms, TerminalRequest{Command: "echo", Args: []string{"hi"}})
	evs := log.of(id)
	want := []TerminalEvent{
		{Type: EventTerminalCreated, ID: id, Command: "echo", Args: []string{"hi"}, Cwd: root},
		{Type: EventTerminalExited, ID: id, Command: "echo", Args: []string{"hi"}, Cwd: root, ExitCode: intp(0), Bytes: 3},
	}
	if diff := cmp.Diff(want, evs, cmpopts.IgnoreFields(TerminalEvent{}, "PID", "Duration")); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if evs[0].PID <= 1 || evs[1].PID != evs[0].PID || evs[1].Duration <= 0 {
		t.Errorf("events PID %d/%d, duration %v; want one real pid and a duration", evs[0].PID, evs[1].PID, evs[1].Duration)
	}
}
