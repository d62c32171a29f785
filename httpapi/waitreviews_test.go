package httpapi_test

import (
	"context"
	"os/exec"
	"sync/atomic"
	"testing"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/store"
)

// countedReviews counts the reads of a session's reviews.
type countedReviews struct {
	next  httpapi.Reviews
	reads atomic.Int64
}

func (c *countedReviews) PutReview(ctx context.Context, r pool.Review) error {
	return c.next.PutReview(ctx, r)
}

func (c *countedReviews) SetSessionPR(ctx context.Context, session, url string) error {
	return c.next.SetSessionPR(ctx, session, url)
}

func (c *countedReviews) SessionPRs(ctx context.Context) (map[string]string, error) {
	return c.next.SessionPRs(ctx)
}

func (c *countedReviews) TurnReply(ctx context.Context, session string, turn int64) (string, error) {
	return c.next.TurnReply(ctx, session, turn)
}

func (c *countedReviews) Reviews(ctx context.Context, session string) ([]pool.Review, error) {
	c.reads.Add(1)
	return c.next.Reviews(ctx, session)
}

// TestWaitedPromptReadsNoReviews: a prompt sent with wait answers its
// ended turn without reading the session's reviews (a turn a prompt
// started has none: reviews belong to the turns the review endpoint
// starts), which saves a read per turn to every orchestrator that waits;
// a turn asked for by number still comes with its review.
func TestWaitedPromptReadsNoReviews(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	c := &realCluster{hosts: map[string]httpapi.ClusterHost{}, owners: map[string]string{}}
	repo := gitRepo(t)
	var counted *countedReviews
	h := newRealHost(t, c, "a", repo, func(cfg *httpapi.Config, st *store.Store) {
		counted = &countedReviews{next: wiring.Reviews{S: st}}
		cfg.Reviews = counted
	})
	ctx, cancel := context.WithTimeout(context.Background(), realWait)
	defer cancel()
	made := c.createOn(ctx, t, h, "a", repo)
	for i := range 3 {
		tr, err := h.client.Prompt(ctx, made.ID, "", "go", true)
		if err != nil || tr.EndedAt == nil {
			t.Fatalf("prompt %d with wait = %+v, %v; want its ended turn", i+1, tr, err)
		}
	}
	if n := counted.reads.Load(); n != 0 {
		t.Errorf("3 waited prompts read the reviews %d times; want 0", n)
	}
	if _, err := h.client.Turn(ctx, made.ID, 2, true); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Turn(ctx, made.ID, 3, false); err != nil {
		t.Fatal(err)
	}
	if n := counted.reads.Load(); n != 2 {
		t.Errorf("2 turns asked for by number read the reviews %d times; want 2", n)
	}
}
