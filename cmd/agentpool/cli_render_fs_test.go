package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// TestRendererFSAccess: the renderer says "wrote" only of a write the
// daemon made; a write or read it refused shows as refused with the
// reason, with the event data a real acpfs.FS audits (as the launcher
// emits it).
func TestRendererFSAccess(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	r := newRenderer(&out, &out, false)
	fs, err := acpfs.NewFS(acpfs.FSConfig{Root: root, Audit: func(op acpfs.Op) {
		r.event(backends.NewEvent(backends.EventType(op.Type), "a1", op))
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := fs.WriteTextFile(ctx, filepath.Join(root, ".git"), "x"); err == nil {
		t.Fatal("write to .git was not refused")
	}
	if err := fs.WriteTextFile(ctx, filepath.Join(root, "notes.md"), "hello"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.ReadTextFile(ctx, "/etc/passwd", nil, nil); err == nil {
		t.Fatal("read outside the worktree was not refused")
	}
	if _, err := fs.ReadTextFile(ctx, filepath.Join(root, "notes.md"), nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.ReadTextFile(ctx, filepath.Join(root, "missing.md"), nil, nil); err == nil {
		t.Fatal("read of a missing file succeeded")
	}
	got := out.String()
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("rendered %d lines, want 3:\n%s", len(lines), got)
	}
	if !strings.HasPrefix(lines[0], "  write .git refused: ") || !strings.Contains(lines[0], acpfs.ErrGitDir.Error()) {
		t.Errorf("refused write rendered as %q", lines[0])
	}
	if lines[1] != "  wrote notes.md" {
		t.Errorf("write rendered as %q", lines[1])
	}
	if !strings.HasPrefix(lines[2], "  read /etc/passwd refused: ") || !strings.Contains(lines[2], acpfs.ErrOutsideRoot.Error()) {
		t.Errorf("refused read rendered as %q", lines[2])
	}
	if strings.Contains(got, "wrote .git") {
		t.Errorf("a refused write is reported as written:\n%s", got)
	}
}

// TestRendererFSFailed: a write that failed (outcome error) is said to have
// failed, with the error; an event without a reason still says so.
func TestRendererFSFailed(t *testing.T) {
	var out bytes.Buffer
	r := newRenderer(&out, &out, false)
	r.event(backends.NewEvent(backends.EventFSWrite, "a1", acpfs.Op{Type: acpfs.OpWrite, Path: "a.txt", Outcome: acpfs.OutcomeError, Error: "no space left on device"}))
	r.event(backends.NewEvent(backends.EventFSWrite, "a1", acpfs.Op{Type: acpfs.OpWrite, Path: "b.txt", Outcome: acpfs.OutcomeRefused}))
	want := "  write a.txt failed: no space left on device\n  write b.txt refused: no reason given\n"
	if got := out.String(); got != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", got, want)
	}
}

// TestRendererUsageDropped: a number of the agent's usage that was
// dropped is said among the turn's notes.
func TestRendererUsageDropped(t *testing.T) {
	var out, note bytes.Buffer
	r := newRenderer(&out, &note, false)
	r.event(backends.NewEvent(pool.EventUsageDropped, "a1", pool.UsageDropped{Dropped: "cost.amount", Value: "1.7e308", Reason: "over the bound of 1e+09 per report"}))
	want := "agent a1: dropped cost.amount 1.7e308 the agent reported: over the bound of 1e+09 per report\n"
	if got := note.String(); got != want {
		t.Errorf("rendered %q; want %q", got, want)
	}
}
