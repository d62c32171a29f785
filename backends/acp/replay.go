package acp

import (
	"context"
	"time"
)

// Replay after session/load (ACP-NOTES, "Real agents" items 7 and 15).
//
// The spec has the agent replay the conversation as session/update
// notifications before it answers session/load; gemini-cli 0.61 answers
// first and replays after (one update, the answer, then the rest, spread
// over tens of milliseconds), and any agent may send updates after an
// answer (item 7). So the end of the replay is not the answer. The replay
// window runs from the session/load request until the first session/prompt
// is written:
//
//   - every update of the window is delivered through Config.OnEvent,
//     outside any turn, even while the first prompt's turn is already set
//     and waiting; its conversation (chunks, tool calls, plans, unknown
//     kinds) comes out as backends.EventHistory, while state updates
//     (commands, mode, config, session info, usage) keep their own types,
//     since they describe the session as it is now;
//   - the first Prompt waits, before writing session/prompt, until no
//     update has arrived for ReplayQuiet (counted from the load's answer at
//     the earliest, so a replay that starts late is still waited for), but
//     never longer than ReplayMaxWait, so an agent that never goes quiet
//     delays its first turn by that much and no more.
//
// After the cap, updates the filter reads before the prompt is written are
// still history; those read after it belong to the turn: the stream has no
// mark that tells a late replayed update from the turn's first output.

// Bounds of the wait of the first prompt after a session/load.
const (
	// ReplayQuiet is how long the agent must send no update before the
	// replay counts as over. gemini-cli sends its replay a few
	// milliseconds apart; 150 ms is several times that gap and short
	// beside a turn.
	ReplayQuiet = 150 * time.Millisecond
	// ReplayMaxWait caps the wait for a quiet replay, measured from the
	// moment the first Prompt begins to wait.
	ReplayMaxWait = 3 * time.Second
)

// awaitReplay ends the replay window of a session/load before the first
// prompt is written: it waits for the replay to go quiet (within
// ReplayMaxWait), then closes the window. It returns false, leaving the
// window open, when ctx ended or Cancel was called during the wait: the
// prompt must not be sent. Without an open window it returns true at once.
func (b *Backend) awaitReplay(ctx context.Context, t *turnState) bool {
	b.mu.Lock()
	replaying := b.replaying
	b.mu.Unlock()
	if !replaying {
		return true
	}
	limit := time.NewTimer(ReplayMaxWait)
	defer limit.Stop()
	// Since Go 1.23 a Reset timer never delivers a stale value.
	quiet := time.NewTimer(ReplayQuiet)
	defer quiet.Stop()
	for {
		b.mu.Lock()
		wait := ReplayQuiet - time.Since(b.replayLast)
		if wait <= 0 {
			b.replaying = false
			b.mu.Unlock()
			return true
		}
		b.mu.Unlock()
		quiet.Reset(wait)
		select {
		case <-quiet.C:
		case <-limit.C:
			b.logger.Warn("session/load replay still going: prompting anyway", "waited", ReplayMaxWait)
			b.endReplay()
			return true
		case <-b.outputDone:
			// The agent has gone: the prompt's write or answer says so.
			b.endReplay()
			return true
		case <-ctx.Done():
			return false
		case <-t.cancelReq:
			return false
		}
	}
}

// endReplay closes the replay window: later updates are live.
func (b *Backend) endReplay() {
	b.mu.Lock()
	b.replaying = false
	b.mu.Unlock()
}
