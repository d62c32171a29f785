package pool

import (
	"context"
	"time"
)

// FullBriefing makes the full briefing of the next turn of a session for
// agent, as an agent new to it would get it, without sending it.
// at is the worktree's checkpoint before the turn ("": its live state).
func FullBriefing(ctx context.Context, p *Pool, session, agent string, turn int64, at string) (BriefingData, bool, error) {
	s, err := p.loadSession(ctx, session)
	if err != nil {
		return BriefingData{}, false, err
	}
	return p.makeBriefing(ctx, s, agent, turn, at, 0, false, 0)
}

// Checkpoint takes a checkpoint of a session's worktree, as a turn does
// before it starts.
func Checkpoint(ctx context.Context, p *Pool, session string) (string, error) {
	s, err := p.loadSession(ctx, session)
	if err != nil {
		return "", err
	}
	return p.cfg.Worktrees.Checkpoint(ctx, s.wt)
}

// SetMaxQueued sets how many prompts may wait for a backend slot, for
// tests of the queue's bound.
func SetMaxQueued(p *Pool, n int) {
	p.mu.Lock()
	p.slots.max = n
	p.mu.Unlock()
}

// SlowEpisodeGap is how long a slowed session's events must find room at
// once before its episode ends.
const SlowEpisodeGap = slowEpisodeGap

// OthersActive is how recently another session must have published for a
// slowed one to be paced.
const OthersActive = othersActive

// PaceBurst is the unused time at the slowed rate a paced session is
// credited with.
const PaceBurst = paceBurst

// Paced returns the pacing a session's slowed agent waited in all (see
// pace).
func Paced(p *Pool, session string) time.Duration {
	p.mu.Lock()
	s := p.sessions[session]
	p.mu.Unlock()
	if s == nil {
		return 0
	}
	_, paced, _ := s.slowing.count(time.Now())
	return paced
}
