package wiring

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/store"
)

// Reviews adapts the store's reviews and pull request URLs to
// httpapi.Reviews.
type Reviews struct{ S *store.Store }

var _ httpapi.Reviews = Reviews{}

// PutReview stores a review, its comments as JSON.
func (a Reviews) PutReview(ctx context.Context, r pool.Review) error {
	b, err := json.Marshal(r.Comments)
	if err != nil {
		return fmt.Errorf("encode review comments: %w", err)
	}
	return notFound(a.S.PutReview(ctx, store.Review{Session: r.Session, Turn: r.Turn, Summary: r.Summary,
		Comments: string(b), Judged: r.Judged, CreatedAt: r.CreatedAt}))
}

// Reviews lists a session's reviews, oldest first.
func (a Reviews) Reviews(ctx context.Context, session string) ([]pool.Review, error) {
	rows, err := a.S.Reviews(ctx, session)
	if err != nil {
		return nil, err
	}
	out := make([]pool.Review, len(rows))
	for i, r := range rows {
		out[i] = pool.Review{Session: r.Session, Turn: r.Turn, Summary: r.Summary, Judged: r.Judged, CreatedAt: r.CreatedAt}
		if err := json.Unmarshal([]byte(r.Comments), &out[i].Comments); err != nil {
			return nil, fmt.Errorf("review of session %q turn %d: decode comments: %w", session, r.Turn, err)
		}
	}
	return out, nil
}

// SetSessionPR records a session's pull request URL.
func (a Reviews) SetSessionPR(ctx context.Context, session, url string) error {
	return notFound(a.S.SetSessionPR(ctx, session, url))
}

// SessionPRs returns every recorded pull request URL by session.
func (a Reviews) SessionPRs(ctx context.Context) (map[string]string, error) {
	return a.S.SessionPRs(ctx)
}

// TurnReply returns the agent's text of a turn.
func (a Reviews) TurnReply(ctx context.Context, session string, turn int64) (string, error) {
	return a.S.TurnReply(ctx, session, turn)
}
