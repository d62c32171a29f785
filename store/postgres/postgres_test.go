package postgres

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRebind: SQLite's placeholders become PostgreSQL's; quoted text and
// comments keep theirs.
func TestRebind(t *testing.T) {
	tests := []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = $1 AND c = $2"},
		{"VALUES (?1, ?2, (SELECT x FROM t WHERE s = ?2), ?3)", "VALUES ($1, $2, (SELECT x FROM t WHERE s = $2), $3)"},
		{"SELECT '?' , \"a?\" FROM t WHERE x = ? -- why?\nAND y = ?", "SELECT '?' , \"a?\" FROM t WHERE x = $1 -- why?\nAND y = $2"},
		{"unnest(?::text[], ?::bigint[])", "unnest($1::text[], $2::bigint[])"},
	}
	for _, tt := range tests {
		if got := Rebind(tt.in); got != tt.want {
			t.Errorf("Rebind(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestPasswordFile: a file only its owner may read gives its first line;
// one that group or others may read is refused.
func TestPasswordFile(t *testing.T) {
	dir := t.TempDir()
	tight := filepath.Join(dir, "tight")
	if err := os.WriteFile(tight, []byte("secret\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pw, err := ReadPasswordFile(tight); err != nil || pw != "secret" {
		t.Errorf("ReadPasswordFile(0600) = %q, %v; want secret", pw, err)
	}
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("secret\n"), 0o604); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPasswordFile(loose); err == nil {
		t.Error("ReadPasswordFile(0604) error = nil; want a refusal")
	}
}
