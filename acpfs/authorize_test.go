package acpfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// authLog is an Authorizer that refuses or allows, and records what it saw.
type authLog struct {
	deny bool
	mu   sync.Mutex
	seen []Access
}

func (a *authLog) fn(_ context.Context, acc Access) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, acc)
	if a.deny {
		return fmt.Errorf("policy says no: %w", ErrPermissionDenied)
	}
	return nil
}

func (a *authLog) accesses() []Access {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Access(nil), a.seen...)
}

// A refusing Authorizer stops reads, writes and terminals after the guard
// accepted them: nothing is read, written or started, the error wraps
// ErrPermissionDenied, and the audit says refused.
func TestAuthorizerDenies(t *testing.T) {
	f, tr, log := newTestFS(t, FSConfig{})
	auth := &authLog{deny: true}
	ctx := WithAuthorizer(context.Background(), auth.fn)

	if got, err := f.ReadTextFile(ctx, tr.root+"/a.txt", nil, nil); !errors.Is(err, ErrPermissionDenied) || got != "" {
		t.Errorf("ReadTextFile denied = %q, %v; want ErrPermissionDenied", got, err)
	}
	if op := log.last(t); op.Type != OpRead || op.Outcome != OutcomeRefused || op.Path != "a.txt" {
		t.Errorf("audit of the denied read = %+v; want refused", op)
	}
	if err := f.WriteTextFile(ctx, tr.root+"/new.txt", "x"); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("WriteTextFile denied error = %v; want ErrPermissionDenied", err)
	}
	if op := log.last(t); op.Type != OpWrite || op.Outcome != OutcomeRefused {
		t.Errorf("audit of the denied write = %+v; want refused", op)
	}
	if _, err := os.Stat(tr.root + "/new.txt"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("denied write created the file: %v", err)
	}

	terms, err := NewTerminals(TerminalsConfig{Guard: f.Guard()})
	if err != nil {
		t.Fatal(err)
	}
	defer terms.Close()
	marker := filepath.Join(tr.root, "ran")
	if _, err := terms.Create(ctx, TerminalRequest{Command: "touch " + marker, Cwd: tr.root + "/dir"}); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("Create denied error = %v; want ErrPermissionDenied", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("denied terminal ran: %v", err)
	}
	want := []Access{
		{Op: OpRead, Path: tr.root + "/a.txt", Rel: "a.txt"},
		{Op: OpWrite, Path: tr.root + "/new.txt", Rel: "new.txt", Bytes: 1},
		{Op: OpTerminal, Path: tr.root + "/dir", Rel: "dir", Command: "touch " + marker},
	}
	got := auth.accesses()
	if len(got) != len(want) {
		t.Fatalf("Authorizer saw %+v; want %+v", got, want)
	}
	for i := range want {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Errorf("access %d = %+v; want %+v", i, got[i], want[i])
		}
	}
}

// The guard runs first: a path it refuses never reaches the Authorizer, so
// no one is asked about it. An allowing Authorizer lets everything through.
func TestAuthorizerAfterGuard(t *testing.T) {
	f, tr, _ := newTestFS(t, FSConfig{})
	auth := &authLog{}
	ctx := WithAuthorizer(context.Background(), auth.fn)
	if _, err := f.ReadTextFile(ctx, tr.root+"/link-out-file", nil, nil); !errors.Is(err, ErrOutsideRoot) {
		t.Errorf("ReadTextFile(outside) error = %v; want ErrOutsideRoot", err)
	}
	if err := f.WriteTextFile(ctx, tr.root+"/.git/config", "x"); !errors.Is(err, ErrGitDir) {
		t.Errorf("WriteTextFile(.git) error = %v; want ErrGitDir", err)
	}
	if n := len(auth.accesses()); n != 0 {
		t.Errorf("Authorizer called %d times for refused paths; want 0", n)
	}
	if err := f.WriteTextFile(ctx, tr.root+"/ok.txt", "ok"); err != nil {
		t.Errorf("WriteTextFile allowed error = %v", err)
	}
	if got, err := f.ReadTextFile(ctx, tr.root+"/ok.txt", nil, nil); err != nil || got != "ok" {
		t.Errorf("ReadTextFile allowed = %q, %v; want ok", got, err)
	}
}
