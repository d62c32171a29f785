package store

import (
	"context"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jmoiron/sqlx"
)

// TestMigrateNumbersTurnsPerSession builds a database as version 0001 left
// it (turn ids counted across sessions, events and permissions naming
// turns by id), then opens it with the store: turns get numbers per
// session in the order they started, and what named a turn by id names it
// by number.
func TestMigrateNumbersTurnsPerSession(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentpool.db")
	dsn, err := dataSourceName(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlx.Open("sqlite3", dsn)
	if err != nil {
		t.Fatal(err)
	}
	initOnly := fstest.MapFS{}
	body, err := fs.ReadFile(migrationFS, "migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	initOnly["migrations/0001_init.sql"] = &fstest.MapFile{Data: body}
	if err := migrate(ctx, db, initOnly, time.Now); err != nil {
		t.Fatalf("migrate(0001) error = %v", err)
	}
	for _, q := range []string{
		`INSERT INTO sessions (id, repo, status, created_at, updated_at) VALUES ('a', '/r', 'open', 1, 1), ('b', '/r', 'closed', 1, 1)`,
		// Ids interleave across sessions; b's turn 6 started before its turn 4.
		`INSERT INTO turns (id, session_id, agent, prompt, started_at, ended_at) VALUES
			(1, 'a', 'x', 'a first', 10, 11), (2, 'b', 'x', 'b first', 20, 21), (3, 'a', 'x', 'a second', 30, NULL),
			(4, 'b', 'x', 'b third', 50, 51), (6, 'b', 'x', 'b second', 40, 41)`,
		`INSERT INTO events (session_id, seq, turn_id, type, data, created_at) VALUES
			('a', 1, NULL, 'session.created', '{"repo":"/r"}', 1),
			('a', 2, 3, 'turn.started', '{"turn":3,"agent":"x","prompt":"a second"}', 30),
			('b', 1, 4, 'turn.ended', '{"turn":4,"stop_reason":"end_turn"}', 51),
			('b', 2, NULL, 'worktree.restored', '{"turn":6,"after":false}', 60),
			('b', 3, NULL, 'note', '{"turn":1}', 61),
			('b', 4, NULL, 'raw', 'not json "turn"', 62)`,
		`INSERT INTO permissions (id, session_id, turn_id, requested_at) VALUES ('p1', 'b', 6, 45), ('p2', 'a', NULL, 46)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, _ := openTest(t, Config{Path: path})
	type key struct {
		Session string
		Number  int64
		Prompt  string
	}
	var got []key
	for _, id := range []string{"a", "b"} {
		l, err := s.ListTurns(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range l {
			got = append(got, key{tr.SessionID, tr.Number, tr.Prompt})
		}
	}
	want := []key{{"a", 1, "a first"}, {"a", 2, "a second"}, {"b", 1, "b first"}, {"b", 2, "b second"}, {"b", 3, "b third"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("turns after the migration (-want +got):\n%s", diff)
	}

	type ev struct {
		Turn int64
		Data string
	}
	var evs []ev
	for _, id := range []string{"a", "b"} {
		l, err := s.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l {
			evs = append(evs, ev{e.Turn, string(e.Data)})
		}
	}
	wantEvs := []ev{
		{0, `{"repo":"/r"}`},
		{2, `{"turn":2,"agent":"x","prompt":"a second"}`},
		{3, `{"turn":3,"stop_reason":"end_turn"}`},
		{0, `{"turn":2,"after":false}`},
		{0, `{"turn":1}`}, // turn id 1 is session a's: left alone
		{0, `not json "turn"`},
	}
	if diff := cmp.Diff(wantEvs, evs); diff != "" {
		t.Errorf("events after the migration (-want +got):\n%s", diff)
	}
	for _, e := range evs {
		if json.Valid([]byte(e.Data)) {
			continue
		}
		if e.Data != `not json "turn"` {
			t.Errorf("event data %q is no longer JSON", e.Data)
		}
	}

	perms, err := s.ListPermissions(ctx, "b")
	if err != nil || len(perms) != 1 || perms[0].Turn != 2 {
		t.Errorf("ListPermissions(b) = %+v, %v; want p1 of turn 2", perms, err)
	}

	// New turns go on from each session's last number; row ids are not reused.
	if n, err := s.StartTurn(ctx, Turn{SessionID: "a", Agent: "x", Prompt: "a third"}); err != nil || n != 3 {
		t.Errorf("StartTurn(a) after the migration = %d, %v; want 3", n, err)
	}
	if tr, err := s.GetTurn(ctx, "a", 3); err != nil || tr.ID <= 6 {
		t.Errorf("GetTurn(a, 3) = %+v, %v; want a row id above 6", tr, err)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO turns (session_id, number, agent, prompt, started_at)
		VALUES ('a', 1, 'x', 'dup', 1)`); err == nil {
		t.Errorf("a second turn 1 of session a was accepted; want UNIQUE(session_id, number)")
	}
}
