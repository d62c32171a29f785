package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/agentpool/agentpool/backends"
)

// Review is a review of a session's diff, sent to its agent as the prompt
// of turn Turn.
type Review struct {
	Session string
	Turn    int64
	Summary string
	// Comments is the review's comments as its caller encodes them
	// (JSON); the store keeps them as given.
	Comments string
	// Judged is true once the comments were marked against the turn
	// that answered them.
	Judged    bool
	CreatedAt time.Time
}

type reviewRow struct {
	SessionID string `db:"session_id"`
	Turn      int64  `db:"turn"`
	Summary   string `db:"summary"`
	Comments  string `db:"comments"`
	Judged    bool   `db:"judged"`
	CreatedAt int64  `db:"created_at"`
}

// PutReview stores r, with CreatedAt from the clock when zero, replacing
// the review of the same (session, turn). It returns ErrNotFound when the
// session does not exist.
func (s *Store) PutReview(ctx context.Context, r Review) error {
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.now()
	}
	err := s.fenced(ctx, r.Session, func(ex sqlx.ExtContext) error {
		_, err := ex.ExecContext(ctx, `INSERT INTO reviews (session_id, turn, summary, comments, judged, created_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (session_id, turn) DO UPDATE SET summary = excluded.summary,
			comments = excluded.comments, judged = excluded.judged`,
			r.Session, r.Turn, r.Summary, r.Comments, r.Judged, toUnix(r.CreatedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("put review of session %q turn %d: %w", r.Session, r.Turn, s.mapWriteErr(err))
	}
	return nil
}

// Reviews returns the reviews of session, oldest turn first (none: an
// empty list, whether or not the session exists).
func (s *Store) Reviews(ctx context.Context, session string) ([]Review, error) {
	var rows []reviewRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT session_id, turn, summary, comments, judged, created_at
		FROM reviews WHERE session_id = ? ORDER BY turn`, session); err != nil {
		return nil, fmt.Errorf("reviews of session %q: %w", session, err)
	}
	out := make([]Review, len(rows))
	for i, r := range rows {
		out[i] = Review{Session: r.SessionID, Turn: r.Turn, Summary: r.Summary, Comments: r.Comments,
			Judged: r.Judged, CreatedAt: fromUnix(r.CreatedAt)}
	}
	return out, nil
}

// SetSessionPR records the URL of the pull request of session id ("" to
// forget it) and stamps UpdatedAt. It returns ErrNotFound for an unknown
// id.
func (s *Store) SetSessionPR(ctx context.Context, id, url string) error {
	return s.updateSession(ctx, id, "pr_url", url)
}

// SessionPRs returns the recorded pull request URL of every session that
// has one, by session id.
func (s *Store) SessionPRs(ctx context.Context) (map[string]string, error) {
	var rows []struct {
		ID  string `db:"id"`
		URL string `db:"pr_url"`
	}
	if err := s.db.SelectContext(ctx, &rows, `SELECT id, pr_url FROM sessions WHERE pr_url != ''`); err != nil {
		return nil, fmt.Errorf("pull requests of sessions: %w", err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.ID] = r.URL
	}
	return out, nil
}

// TurnReply returns the text the agent wrote in turn of session (its
// message chunks, thoughts and echoes left out), as written so far.
func (s *Store) TurnReply(ctx context.Context, session string, turn int64) (string, error) {
	var data []string
	if err := s.db.SelectContext(ctx, &data, `SELECT data FROM events
		WHERE session_id = ? AND turn = ? AND type = ? AND data IS NOT NULL ORDER BY seq`,
		session, turn, string(backends.EventMessageChunk)); err != nil {
		return "", fmt.Errorf("reply of session %q turn %d: %w", session, turn, err)
	}
	var b strings.Builder
	for _, d := range data {
		var c backends.ChunkData
		if json.Unmarshal([]byte(d), &c) == nil && c.Role == backends.RoleAgent {
			b.WriteString(c.Text)
		}
	}
	return b.String(), nil
}
