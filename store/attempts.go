package store

import (
	"context"
	"fmt"
	"time"
)

// SaveAttemptSet inserts or replaces the attempt set id, body being its
// JSON.
func (s *Store) SaveAttemptSet(ctx context.Context, id string, createdAt time.Time, body []byte) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO attempt_sets (id, created_at, body) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`, id, toUnix(createdAt), string(body)); err != nil {
		return fmt.Errorf("save attempt set %q: %w", id, s.mapWriteErr(err))
	}
	return nil
}

// ListAttemptSets returns the bodies of every attempt set, oldest first.
func (s *Store) ListAttemptSets(ctx context.Context) ([][]byte, error) {
	var rows []string
	if err := s.db.SelectContext(ctx, &rows, `SELECT body FROM attempt_sets ORDER BY created_at, id`); err != nil {
		return nil, fmt.Errorf("list attempt sets: %w", err)
	}
	out := make([][]byte, len(rows))
	for i, r := range rows {
		out[i] = []byte(r)
	}
	return out, nil
}
