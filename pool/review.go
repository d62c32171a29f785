package pool

import "time"

// Sides of a diff a review comment is on.
const (
	// SideNew is the session's version of the file (the worktree).
	SideNew = "new"
	// SideOld is the base's version: a line the session removed.
	SideOld = "old"
)

// How a review comment was found addressed (ReviewComment.AddressedBy).
const (
	// AddressedByDiff: the turn that answered changed lines at or near the
	// comment's location.
	AddressedByDiff = "diff"
	// AddressedByReply: the agent's reply named the comment's path:line.
	AddressedByReply = "reply"
)

// Review is a review of a session's diff, sent to an agent as the prompt
// of turn Turn. The pool neither stores nor reads it: the API does, and
// shows it on the turn it started.
type Review struct {
	Session  string          `json:"session"`
	Turn     int64           `json:"turn"`
	Summary  string          `json:"summary,omitempty"`
	Comments []ReviewComment `json:"comments"`
	// Judged is true once the turn ended and each comment was marked
	// addressed or not.
	Judged    bool      `json:"judged"`
	CreatedAt time.Time `json:"created_at"`
}

// ReviewComment is one comment on a line of a session's diff.
type ReviewComment struct {
	// Path is relative to the worktree, as the diff names the file.
	Path string `json:"path"`
	// Line is 1-based, on Side's version of the file.
	Line int `json:"line"`
	// Side is SideNew or SideOld.
	Side string `json:"side"`
	Text string `json:"text"`
	// Addressed is nil until the answering turn ended, then whether it
	// was addressed, and AddressedBy how (AddressedByDiff or
	// AddressedByReply).
	Addressed   *bool  `json:"addressed,omitempty"`
	AddressedBy string `json:"addressed_by,omitempty"`
}
