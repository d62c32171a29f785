package acpfs

import (
	"context"
	"errors"
	"testing"
)

// Exited but unreleased terminals count against MaxRetained and their output
// limits against MaxRetainedOutput; past either, Create fails with
// ErrRetentionLimit, and Release makes room again.
func TestTerminalsRetentionLimits(t *testing.T) {
	ctx := context.Background()
	run := func(terms *Terminals, limit *int) (string, error) {
		id, err := terms.Create(ctx, TerminalRequest{Command: "true", OutputByteLimit: limit})
		if err == nil {
			_, err = terms.WaitForExit(ctx, id)
		}
		return id, err
	}
	t.Run("count", func(t *testing.T) {
		terms, _, _ := newTestTerminals(t, TerminalsConfig{MaxRetained: 3})
		var ids []string
		for i := range 3 {
			id, err := run(terms, nil)
			if err != nil {
				t.Fatalf("terminal %d: %v", i, err)
			}
			ids = append(ids, id)
		}
		if _, err := run(terms, nil); !errors.Is(err, ErrRetentionLimit) {
			t.Fatalf("4th unreleased terminal error = %v; want ErrRetentionLimit", err)
		}
		if err := terms.Release(ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := run(terms, nil); err != nil {
			t.Errorf("terminal after a release: %v", err)
		}
	})
	t.Run("output bytes", func(t *testing.T) {
		terms, _, _ := newTestTerminals(t, TerminalsConfig{OutputCap: 1000, MaxRetainedOutput: 2500})
		id, err := run(terms, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run(terms, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := run(terms, nil); !errors.Is(err, ErrRetentionLimit) {
			t.Fatalf("third 1000-byte terminal error = %v; want ErrRetentionLimit", err)
		}
		if _, err := run(terms, intp(400)); err != nil {
			t.Errorf("a 400-byte terminal that fits: %v", err)
		}
		if err := terms.Release(id); err != nil {
			t.Fatal(err)
		}
		if _, err := run(terms, nil); err != nil {
			t.Errorf("terminal after a release: %v", err)
		}
	})
}
