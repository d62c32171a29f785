package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentpool/agentpool/backends"
)

// ErrConflict is returned (wrapped) when merging a session would conflict,
// the checkout to update has uncommitted changes, or the branch to update
// is in use by another session. Nothing was changed; the message says why.
var ErrConflict = errors.New("conflict")

// EventSessionMerged reports a merge of an open session's branch (or of
// its base into it, with rebase); its data is the MergeResult.
const EventSessionMerged backends.EventType = "session.merged"

// maxSummaryPrompts bounds the prompts listed in a merge's commit message.
const maxSummaryPrompts = 50

// MergeRequest asks to merge a session's branch.
type MergeRequest struct {
	// Into is the local branch to merge into; "" means the session's base
	// (its BaseRef when that is a local branch, else the branch checked
	// out in the main checkout when it was created from HEAD).
	Into string `json:"into,omitempty"`
	// Squash makes one commit summarising the session instead of a merge.
	Squash bool `json:"squash,omitempty"`
	// Rebase brings the session's branch up to date with Into instead.
	Rebase bool `json:"rebase,omitempty"`
}

// WorktreeMerge is what the pool asks the worktree manager to merge.
type WorktreeMerge struct {
	// Into, Squash and Rebase are the request's.
	Into           string
	Squash, Rebase bool
	// Base is the session's BaseRef.
	Base string
	// Title and Summary make a squash or merge commit's message.
	Title, Summary string
}

// MergeCommit is one commit a merge brought in.
type MergeCommit struct {
	ID      string `json:"id"`
	Subject string `json:"subject"`
}

// MergeResult says what merging a session did.
type MergeResult struct {
	Session string `json:"session"`
	// Branch is the session's branch; Into the other branch.
	Branch string `json:"branch"`
	Into   string `json:"into"`
	Rebase bool   `json:"rebase,omitempty"`
	// Committed says the uncommitted work was committed first, as
	// WorkCommit.
	Committed  bool   `json:"committed"`
	WorkCommit string `json:"work_commit,omitempty"`
	// Method is "up-to-date", "fast-forward", "merge" or "squash".
	Method string `json:"method"`
	// Commits are those brought in, newest first; MoreCommits counts the
	// ones not listed.
	Commits     []MergeCommit `json:"commits"`
	MoreCommits int           `json:"more_commits,omitempty"`
	// Updated is the ref that moved from Before to Head.
	Updated string `json:"updated"`
	Before  string `json:"before"`
	Head    string `json:"head"`
	// WorkingTree is the checkout whose files were updated, if any.
	WorkingTree string `json:"working_tree,omitempty"`
}

// Merge merges the session's branch into its base or req.Into in the
// main repository, or with req.Rebase brings the session's branch up to
// date with it. The session's uncommitted work is committed to its branch
// first, so nothing is left behind; a squash commit's message lists the
// session's prompts. A closed session's branch can be merged (not
// rebased). It refuses a session running a turn (ErrBusy), and a merge
// that would conflict or would have to touch a dirty checkout
// (ErrConflict, changing nothing). An open session's stream gets
// session.merged.
func (p *Pool) Merge(ctx context.Context, id string, req MergeRequest) (MergeResult, error) {
	if req.Squash && req.Rebase {
		return MergeResult{}, fmt.Errorf("%w: squash and rebase do not go together", ErrInvalid)
	}
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return MergeResult{}, err
	}
	busy, turn, closed, wt, rec := s.state()
	switch {
	case busy:
		return MergeResult{}, fmt.Errorf("session %q is running turn %d; merge it when the turn has ended: %w", id, turn, ErrBusy)
	case closed && req.Rebase:
		return MergeResult{}, fmt.Errorf("session %q: its worktree is gone, there is nothing to bring up to date: %w", id, ErrClosed)
	case wt.Path == "":
		return MergeResult{}, fmt.Errorf("session %q has no worktree: %w", id, ErrNotFound)
	}
	wm := WorktreeMerge{Into: req.Into, Squash: req.Squash, Rebase: req.Rebase, Base: rec.BaseRef, Title: rec.Title}
	if !req.Rebase {
		turns, err := p.cfg.Store.ListTurns(ctx, id)
		if err != nil {
			return MergeResult{}, fmt.Errorf("merge session %q: %w", id, err)
		}
		wm.Summary = mergeSummary(id, rec.Title, turns)
	}
	res, err := p.cfg.Worktrees.Merge(ctx, wt, wm)
	if err != nil {
		return MergeResult{}, err
	}
	res.Session = id
	if !closed {
		p.emit(s, EventSessionMerged, "", res)
	}
	return res, nil
}

// mergeSummary is the body of a session's squash or merge commit: its
// title and the prompts of its turns, one line each.
func mergeSummary(id, title string, turns []Turn) string {
	var b strings.Builder
	if title != "" {
		fmt.Fprintf(&b, "agentpool session %s: %s\n", id, title)
	} else {
		fmt.Fprintf(&b, "agentpool session %s\n", id)
	}
	if len(turns) == 0 {
		return strings.TrimSuffix(b.String(), "\n")
	}
	b.WriteString("\nPrompts:\n")
	for i, t := range turns {
		if i == maxSummaryPrompts {
			fmt.Fprintf(&b, "- … and %d more\n", len(turns)-i)
			break
		}
		fmt.Fprintf(&b, "- %s\n", summaryLine(t.Prompt, 72))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// summaryLine flattens s to one line of at most n runes.
func summaryLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
