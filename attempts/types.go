package attempts

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentpool/agentpool/permission"
)

// States of a Set.
const (
	SetRunning = "running"
	SetDone    = "done"
	SetPicked  = "picked"
)

// States of an Attempt.
const (
	AttemptStarting = "starting"
	AttemptRunning  = "running"
	AttemptChecking = "checking"
	AttemptDone     = "done"
	AttemptFailed   = "failed"
)

// States of a Check.
const (
	CheckPending = "pending"
	CheckRunning = "running"
	CheckPassed  = "passed"
	CheckFailed  = "failed"
	CheckNone    = "none"
)

// Bounds of a Request.
const (
	// MaxAttempts is the most sessions one set may start.
	MaxAttempts = 10
	// DefaultCheckTimeout bounds a check command.
	DefaultCheckTimeout = 10 * time.Minute
)

// Errors of the Manager.
var (
	// ErrNotFound: no attempt set of that id, or no attempt of that
	// session in it.
	ErrNotFound = errors.New("attempt set not found")
	// ErrConflict: the set was already picked, or the attempt picked has
	// not ended.
	ErrConflict = errors.New("attempt set conflict")
)

// FieldError is an invalid Request or PickRequest; Field names the JSON
// field at fault.
type FieldError struct {
	Field   string
	Message string
}

// Error implements error.
func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Message) }

// Request starts an attempt set (the body of POST /v1/attempts).
type Request struct {
	Prompt string `json:"prompt"`
	Repo   string `json:"repo"`
	// Base is a branch or commit; "" means the repository's HEAD.
	Base string `json:"base,omitempty"`
	// Agents gives one attempt per agent; or Agent with N attempts.
	Agents []string `json:"agents,omitempty"`
	Agent  string   `json:"agent,omitempty"`
	N      int      `json:"n,omitempty"`
	// Check is a shell command run in each worktree after its turn.
	Check string `json:"check,omitempty"`
	Title string `json:"title,omitempty"`
}

// PickRequest picks an attempt (the body of POST /v1/attempts/{id}/pick).
type PickRequest struct {
	Session string `json:"session"`
	// Discard deletes the other attempts' branches instead of keeping them.
	Discard bool `json:"discard,omitempty"`
	Squash  bool `json:"squash,omitempty"`
	// Message is accepted for the contract's sake; the merge commit's
	// message is the merge endpoint's own.
	Message string `json:"message,omitempty"`
}

// Set is an attempt set: one prompt, several sessions.
type Set struct {
	ID         string `json:"id"`
	Title      string `json:"title,omitempty"`
	Prompt     string `json:"prompt"`
	Repo       string `json:"repo"`
	Base       string `json:"base,omitempty"`
	BaseCommit string `json:"base_commit"`
	// Into is the branch a pick merges into ("" for the session's default).
	Into      string    `json:"into,omitempty"`
	Check     string    `json:"check,omitempty"`
	State     string    `json:"state"`
	Picked    string    `json:"picked"`
	CreatedAt time.Time `json:"created_at"`
	Attempts  []Attempt `json:"attempts"`
}

// Attempt is one session of a Set.
type Attempt struct {
	Session      string          `json:"session"`
	Agent        string          `json:"agent"`
	Turn         int64           `json:"turn"`
	State        string          `json:"state"`
	StopReason   string          `json:"stop_reason,omitempty"`
	DurationMS   int64           `json:"duration_ms"`
	Usage        json.RawMessage `json:"usage"`
	FilesChanged int             `json:"files_changed"`
	LinesAdded   int             `json:"lines_added"`
	LinesRemoved int             `json:"lines_removed"`
	Check        *Check          `json:"check"`
	Error        string          `json:"error,omitempty"`
	// Closed says the session was closed by a pick (its branch kept or,
	// with discard, deleted).
	Closed bool `json:"closed,omitempty"`
	// PendingPermissions are the session's permission requests waiting
	// for an answer now, oldest first: its turn is blocked until each is
	// answered (POST /v1/sessions/{session}/permissions/{id}) or times
	// out and is rejected. Read from the pool each time the set is
	// answered; never stored.
	PendingPermissions []permission.Pending `json:"pending_permissions,omitempty"`
}

// Check is the result of an attempt's check command.
type Check struct {
	State    string `json:"state"`
	ExitCode int    `json:"exit_code"`
	Output   string `json:"output"`
	// Confined says how it was confined, and what confinement is missing.
	Confined string `json:"confined,omitempty"`
}

// clone deep-copies s.
func (s *Set) clone() Set {
	c := *s
	c.Attempts = make([]Attempt, len(s.Attempts))
	for i, a := range s.Attempts {
		if a.Check != nil {
			ch := *a.Check
			a.Check = &ch
		}
		c.Attempts[i] = a
	}
	return c
}

// asks reports whether an attempt waits for a permission answer.
func (s *Set) asks() bool {
	for _, a := range s.Attempts {
		if len(a.PendingPermissions) > 0 {
			return true
		}
	}
	return false
}

// ended reports whether every attempt has ended.
func (s *Set) ended() bool {
	for _, a := range s.Attempts {
		if a.State != AttemptDone && a.State != AttemptFailed {
			return false
		}
	}
	return true
}
