package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPragmasOnEveryConnection(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Config{BusyTimeout: 1234 * time.Millisecond})
	// Hold three connections at once so that the pool must open new ones.
	for i := range 3 {
		conn, err := s.db.Connx(ctx)
		if err != nil {
			t.Fatalf("Connx() error = %v", err)
		}
		defer conn.Close()
		checks := []struct {
			pragma string
			want   string
		}{
			{"journal_mode", "wal"},
			{"foreign_keys", "1"},
			{"synchronous", "1"}, // NORMAL
			{"busy_timeout", "1234"},
			// No commit runs a checkpoint: the checkpointer does.
			{"wal_autocheckpoint", "0"},
		}
		for _, c := range checks {
			var got string
			if err := conn.GetContext(ctx, &got, "PRAGMA "+c.pragma); err != nil {
				t.Fatalf("conn %d: PRAGMA %s error = %v", i, c.pragma, err)
			}
			if got != c.want {
				t.Errorf("conn %d: PRAGMA %s = %q; want %q", i, c.pragma, got, c.want)
			}
		}
	}
}

func TestOpenPathWithURICharacters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a dir#with?odd%chars")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "state?.db")
	s, _ := openTest(t, Config{Path: path})
	mustSession(t, s, "s1")
	if _, err := os.Stat(path); err != nil {
		t.Errorf("Stat(%q) error = %v; want the database at exactly that path", path, err)
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name string
		path string
		want string
	}{
		{"empty path", "", "empty path"},
		{"missing directory", filepath.Join(t.TempDir(), "missing", "x.db"), "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(context.Background(), Config{Path: tt.path})
			if err == nil {
				s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open(%q) error = %v; want one containing %q", tt.path, err, tt.want)
			}
		})
	}
}

func TestCallsAfterClose(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Config{})
	mustSession(t, s, "s1")
	if err := s.Close(); err != nil {
		t.Fatalf("Close() error = %v; want nil", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() error = %v; want nil", err)
	}
	if err := s.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush() after Close error = %v; want ErrClosed", err)
	}
	if _, err := s.GetSession(ctx, "s1"); err == nil {
		t.Errorf("GetSession() after Close error = nil; want an error")
	}
}
