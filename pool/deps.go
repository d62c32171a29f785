package pool

import (
	"context"
	"syscall"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/permission"
)

// SessionRecord is a session as stored.
type SessionRecord struct {
	ID, Repo, BaseRef, Title, ActiveAgent, Status string
	CreatedAt, UpdatedAt                          time.Time
	// MCPServers are the session's own MCP servers, secrets included.
	MCPServers backends.MCPServers
	// Host is the host that holds the session's lease when several hosts
	// share the store ("" alone).
	Host string
}

// Session statuses.
const (
	StatusOpen   = "open"
	StatusClosed = "closed"
)

// AgentRecord is the stored state of one (session, agent) backend.
type AgentRecord struct {
	Session, Agent  string
	Kind            backends.Kind
	AgentSessionID  string
	PID, PGID       int
	StartTicks      uint64
	Status          string // AgentIdle | AgentActive | AgentCrashed | AgentClosed
	Restarts        int
	ResumeSupported bool
	Mode            string
	ConfigOptions   map[string]string
	SpecHash        string
	LastActiveAt    time.Time
	CreatedAt       time.Time
}

// Agent record statuses.
const (
	AgentIdle    = "idle"
	AgentActive  = "active"
	AgentCrashed = "crashed"
	AgentClosed  = "closed"
)

// ErrStorageFull is (wrapped in) the error of a Store or Worktrees call
// that failed because the disk holding the daemon's data or the session's
// repository is full. It is syscall.ENOSPC, so that the errors the store
// and git return for a full disk, which wrap it, are it without
// translation; httpapi answers them 507 Insufficient Storage.
var ErrStorageFull error = syscall.ENOSPC

// Store is what the pool needs of its database. Lookups of missing rows
// return an error wrapping ErrNotFound.
type Store interface {
	// CreateSession stores a new session and its worktree in one
	// transaction: never one without the other.
	CreateSession(ctx context.Context, s SessionRecord, wt Worktree) error
	GetSession(ctx context.Context, id string) (SessionRecord, error)
	ListSessions(ctx context.Context) ([]SessionRecord, error)
	UpdateSessionStatus(ctx context.Context, id, status string) error
	SetActiveAgent(ctx context.Context, id, agent string) error

	PutWorktree(ctx context.Context, wt Worktree) error
	GetWorktree(ctx context.Context, session string) (Worktree, error)
	MarkWorktreeRemoved(ctx context.Context, session string) error

	UpsertAgent(ctx context.Context, a AgentRecord) error
	// AdoptSession queues a session made from a spare, to be stored in
	// one transaction: its row (as CreateSession), its worktree (as
	// PutWorktree), its running agent (as UpsertAgent), when adv is not
	// nil what that agent advertised (as SetAgentAdvertised), and its
	// first event, appended as by Append and stored only with the rest,
	// and, when turn is not nil, the row of its first turn (number 1), as
	// StartTurn stores it. It returns once queued; wait reports whether
	// it was stored.
	AdoptSession(ctx context.Context, s SessionRecord, wt Worktree, a AgentRecord, adv *backends.Advertised, first backends.Event, committed func(backends.Event), turn *Turn) (wait func(context.Context) error, err error)
	GetAgent(ctx context.Context, session, agent string) (AgentRecord, error)
	ListAgents(ctx context.Context, session string) ([]AgentRecord, error)
	// SetAgentAdvertised records what the agent of (session, agent) last
	// advertised, replacing what was recorded; UpsertAgent never changes
	// it. An error wraps ErrNotFound when there is no such agent row.
	SetAgentAdvertised(ctx context.Context, session, agent string, a backends.Advertised) error
	// AgentAdvertised returns what SetAgentAdvertised recorded; ok is
	// false when nothing was.
	AgentAdvertised(ctx context.Context, session, agent string) (a backends.Advertised, ok bool, err error)
	// MarkStaleAgents turns rows left active/idle by a previous daemon into
	// crashed/closed and returns them as they were.
	MarkStaleAgents(ctx context.Context) ([]AgentRecord, error)

	// StartTurn stores a running turn's row and returns its number in the
	// session (1, 2, 3 ...: a turn is known as (session, number)) once the
	// row is durable; a number is never handed out twice. It fails with an
	// error wrapping ErrStorageFull, without storing the row, when the disk
	// is full.
	StartTurn(ctx context.Context, t Turn) (int64, error)
	// EndTurnEvent records how turn t.ID of t.Session ended together with
	// ev, the turn.ended that reports it, in one transaction: both are
	// stored or neither, and ev is stored and delivered (as for Append)
	// only if the turn was still open. It may queue them behind the events
	// appended before and return before they are written; events appended
	// after are committed with or after them. The turn reads must see a
	// queued end unless the store is failing to write. It does not wait
	// for room in a full write queue (a turn's end must not wait for a
	// full disk). An error (the store is closed) means neither was queued.
	EndTurnEvent(ctx context.Context, t Turn, ev backends.Event, committed func(backends.Event)) error
	// UnreportedTurnEnds lists the ended turns that have no turn.ended
	// event (an earlier version could commit a turn's end without it),
	// oldest first.
	UnreportedTurnEnds(ctx context.Context) ([]Turn, error)
	// ReportTurnEnd queues ev, the turn.ended of ended turn ev.Turn of
	// ev.Session, to be stored and delivered (as for Append) only if that
	// turn still has no turn.ended when it is written: reporting a turn
	// twice stores one event.
	ReportTurnEnd(ctx context.Context, ev backends.Event, committed func(backends.Event)) error
	GetTurn(ctx context.Context, session string, turn int64) (Turn, error)
	// TurnByKey reads the turn of session that a prompt carrying key
	// started (Turn.RequestKey), as committed, without waiting for queued
	// writes; an error wrapping ErrNotFound when there is none.
	TurnByKey(ctx context.Context, session, key string) (Turn, error)
	// TurnKeys returns the committed turns of session that prompts
	// carrying a key started: their number, by key.
	TurnKeys(ctx context.Context, session string) (map[string]int64, error)
	LastTurn(ctx context.Context, session string) (Turn, error)
	ListTurns(ctx context.Context, session string) ([]Turn, error)
	// OpenTurns lists the turns that have not ended, oldest first.
	OpenTurns(ctx context.Context) ([]Turn, error)

	// Append queues an event for writing; it never fails (errors are the
	// store's to retry and log). Once the transaction holding ev has
	// committed, committed(ev) is called (when not nil) from the store's
	// writer, one call at a time, each session's in the order of its
	// Append calls (sessions are written round-robin); never
	// for an event that was not stored. committed must not block. Append
	// waits a little for room in a full queue and then drops ev; WaitRoom,
	// called before, waits for room for as long as ctx allows. Flush waits
	// until all queued events are written and their committed calls made.
	Append(ev backends.Event, committed func(backends.Event))
	// AppendPast is Append for an event of a turn that is ending (past
	// its deadline, cancelled): it neither waits for room nor drops ev
	// while the store is open, so a disk that stays full does not hold the
	// turn's agent; the queue grows past its bound by what such turns send.
	AppendPast(ev backends.Event, committed func(backends.Event))
	// WaitRoom waits for room in the write queue for an event of session
	// (a session holding little of the queue finds it sooner).
	WaitRoom(ctx context.Context, session string) error
	// WaitRoomFor is WaitRoom, and says how long it waited (0: there was
	// room at once).
	WaitRoomFor(ctx context.Context, session string) (time.Duration, error)
	// WriteQueues returns, per session with writes queued (or whose
	// producers waited for room lately), what it has in the write queue
	// and how long its producers waited (Episodes left zero).
	WriteQueues() []WriteQueue
	Flush(ctx context.Context) error
	// AwaitDelivery waits until delivered, closed by the committed
	// callback of a write queued before, is closed, asking the writer
	// not to linger meanwhile.
	AwaitDelivery(ctx context.Context, delivered <-chan struct{}) error
	// NextSeq returns the seq after the last one stored or queued for the
	// session, without waiting for the store's writer.
	NextSeq(ctx context.Context, session string) (int64, error)
	// EventsPage reads stored events, at most limit of them, and stops
	// after the one that brings their Data to maxBytes (<= 0: no bound);
	// every event ever given to a committed callback is there.
	EventsPage(ctx context.Context, session string, afterSeq int64, limit int, maxBytes int64) ([]backends.Event, error)

	InsertPermission(ctx context.Context, r permission.Record) error
	// RememberPermission stores, with the session, an answer it remembers
	// (see permission.Record.Remembered), replacing the one it had for the
	// same (agent, action); RememberedPermissions reads them back, and
	// ForgetPermissions deletes them (the session closes).
	RememberPermission(ctx context.Context, r permission.Record) error
	RememberedPermissions(ctx context.Context, session string) ([]permission.Remembered, error)
	ForgetPermissions(ctx context.Context, session string) error

	// DeleteClosedSession deletes a closed session with everything stored
	// about it (worktree row, agents, turns, events, permissions); an
	// error wrapping ErrNotFound when there is no closed session id.
	DeleteClosedSession(ctx context.Context, id string) error
}

// Worktree is a session's git worktree.
type Worktree struct {
	Session    string    `json:"session"`
	Repo       string    `json:"repo"`
	Path       string    `json:"path"`
	Branch     string    `json:"branch"`
	BaseCommit string    `json:"base_commit"`
	CreatedAt  time.Time `json:"created_at"`
	// Agent is the session's active agent, given to Remove and Merge so
	// that the commits of the session's work name it; not stored.
	Agent string `json:"-"`
	// Host is the host whose disk holds the worktree when several hosts
	// share the store ("" alone).
	Host string `json:"host,omitempty"`
}

// RemoveResult says what closing a worktree did with its work.
type RemoveResult struct {
	Branch    string `json:"branch"`
	Committed bool   `json:"committed"`
	Commit    string `json:"commit,omitempty"`
	Discarded bool   `json:"discarded"`
	Missing   bool   `json:"missing,omitempty"`
	// BranchDeleted: the session left no work (no commit beyond its base,
	// nothing uncommitted), so its branch was deleted.
	BranchDeleted bool `json:"branch_deleted,omitempty"`
	// Remote, for a repository given by URL, is where the branch was
	// pushed once the work was committed (the close waits for the push);
	// PushError says why it was not, the work then being on the branch
	// in this host's mirror alone (Host).
	Remote    string `json:"remote,omitempty"`
	PushError string `json:"push_error,omitempty"`
	Host      string `json:"host,omitempty"`
}

// Diff is a set of changes between two worktree states.
type Diff struct {
	From      string       `json:"from"`
	To        string       `json:"to"`
	Files     []FileChange `json:"files"`
	Stat      DiffStat     `json:"stat"`
	Patch     string       `json:"patch"`
	Truncated bool         `json:"truncated,omitempty"`
	// Hidden lists untracked paths that ignore rules the session added or
	// changed keep out of checkpoints and diffs (an agent's .gitignore of
	// "*"), each with the rule; HiddenCount counts them all.
	Hidden      []HiddenFile `json:"hidden,omitempty"`
	HiddenCount int          `json:"hidden_count,omitempty"`
	// Copied lists the files the worktree's setup copied from the main
	// checkout (a .env, certificates), in a diff of the live worktree:
	// not part of the session's work, never committed, shown without
	// content.
	Copied []CopiedFile `json:"copied,omitempty"`
}

// CopiedFile is a file the setup copied into the worktree.
type CopiedFile struct {
	// Path is relative to the worktree.
	Path string `json:"path"`
	// Present is false when the file is no longer in the worktree.
	Present bool `json:"present"`
}

// HiddenFile is a path hidden by an ignore rule the session changed.
type HiddenFile struct {
	// Path is relative to the worktree; a directory ends in "/".
	Path string `json:"path"`
	// Rule is "<file>:<line>:<pattern>".
	Rule string `json:"rule"`
}

// FileChange is one changed path.
type FileChange struct {
	Path       string `json:"path"`
	OldPath    string `json:"old_path,omitempty"`
	Status     string `json:"status"`
	OldMode    string `json:"old_mode,omitempty"`
	NewMode    string `json:"new_mode,omitempty"`
	Additions  int    `json:"additions"`
	Deletions  int    `json:"deletions"`
	Binary     bool   `json:"binary,omitempty"`
	Similarity int    `json:"similarity,omitempty"`
}

// DiffStat sums a Diff.
type DiffStat struct {
	Files     int `json:"files"`
	Additions int `json:"additions"`
	Deletions int `json:"deletions"`
}

// HistoryImporter is what Worktrees may also do: bring the commits an
// agent made in its own git view onto the session branch, verified, when
// they changed since it last looked (cheaply otherwise), and say what
// became of them. The pool calls it at a turn's end and puts a result
// that says something in the turn.ended event, under "history".
type HistoryImporter interface {
	ImportHistory(ctx context.Context, wt Worktree) (HistoryImport, error)
}

// HistoryImport is what became of an agent's own commits.
type HistoryImport struct {
	// Commits counts the commits brought onto the session branch.
	Commits int `json:"commits,omitempty"`
	// Refused says why they were not ("" when they were, or when there
	// was nothing new), Detail more.
	Refused string `json:"refused,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// Worktrees is what the pool needs of the worktree manager.
type Worktrees interface {
	Create(ctx context.Context, session, repo, baseRef string) (Worktree, error)
	Recreate(ctx context.Context, wt Worktree) (Worktree, error)
	Remove(ctx context.Context, wt Worktree, discard bool) (RemoveResult, error)
	Checkpoint(ctx context.Context, wt Worktree) (string, error)
	// Diff compares two checkpoints; from "" is the base commit, to "" the live state.
	Diff(ctx context.Context, wt Worktree, from, to string) (Diff, error)
	Restore(ctx context.Context, wt Worktree, checkpoint string) error
	// RunSetup runs the setup that Create prepared from the repository's
	// setup file (copy untracked files, run the setup command), giving each
	// step to report; it returns when the setup has ended, at once when
	// there is none. A failure is reported in the last step, not returned.
	// Cancelling ctx, or removing the worktree, stops it. Checkpoint and
	// Merge wait for a setup still running.
	RunSetup(ctx context.Context, wt Worktree, report func(SetupEvent)) error
	// PrepareSetup prepares the setup of an existing worktree again from
	// its repository's setup file as it is now, for RunSetup. An untrusted
	// file or a setup still pending is an error wrapping ErrConflict, a
	// repository without one ErrNotFound.
	PrepareSetup(ctx context.Context, wt Worktree) error
	// Merge merges the session's branch (with its uncommitted work) into
	// another branch of the main repository, or with Rebase that branch
	// into it; a conflict or a dirty checkout is an error wrapping
	// ErrConflict and changes nothing. See Pool.Merge.
	Merge(ctx context.Context, wt Worktree, req WorktreeMerge) (MergeResult, error)
	// Prune deletes what git keeps of a removed worktree: its checkpoints,
	// and its branch when empty or when req.Branch says so (never one
	// checked out somewhere). A repository that is gone is reported in
	// the result, not as an error. See Pool.Prune.
	Prune(ctx context.Context, wt Worktree, req WorktreePrune) (BranchPrune, error)
}

// Resolver turns a provider id into a launch spec, or explains why not
// (unknown, disabled, not installed, config error).
type Resolver interface {
	Resolve(id string) (backends.Spec, error)
}

// LaunchRequest is everything a Launcher needs to build a backend.
type LaunchRequest struct {
	// Spec is resolved, with Dir set to the session's worktree.
	Spec backends.Spec
	// Session is the pool session id.
	Session string
	// Worktree is the session's worktree (Spec.Dir is its path): the
	// launcher confines the agent to it and its branch.
	Worktree Worktree
	// Emit receives events produced outside turns (and bridge audit events).
	Emit func(backends.Event)
	// Permission decides the agent's permission requests.
	Permission backends.PermissionFunc
	// MCPServers are the session's own MCP servers: an ACP agent gets
	// them besides Spec.MCPServers (the provider's), a server here
	// replacing the provider's of its name.
	MCPServers backends.MCPServers
	// Early, if set, is what the launcher's LaunchEarly started for this
	// session and agent: Launch owns it, and ends it when it cannot use
	// it.
	Early Early
}

// EarlyLauncher is what a Launcher may also be: it starts what it can of
// an agent's launch before the session's worktree exists (a confined
// agent's launcher, waiting in its cgroup and namespaces for the
// program), so that the session's first start, which Launch is given it
// for (LaunchRequest.Early), does less once the worktree is made. ok is
// false when nothing could be started early for spec.
type EarlyLauncher interface {
	LaunchEarly(spec backends.Spec, session string) (e Early, ok bool)
}

// Early is what an EarlyLauncher started ahead of a launch. Close ends
// it when no launch takes it; it is idempotent.
type Early interface {
	Close()
}

// AuthNoter is what a Resolver may also be: told when an agent refused to
// start until the user logs in, so that its provider's status can say so.
type AuthNoter interface {
	AuthRequired(provider string)
}

// ProbeReporter is what a Resolver may also be: it says when a probe of
// a provider last succeeded (the zero time when none did), which clears
// the crashes of that provider's agents before it (Config.CrashLimit): a
// user who fixed what made an agent crash, and whose probe says so, need
// not wait for the crash window to pass.
type ProbeReporter interface {
	LastProbeOK(provider string) time.Time
}

// Launcher builds an unstarted backend for a spec: the ACP backend with the
// worktree's fs bridge and terminals, or the PTY backend.
type Launcher interface {
	Launch(req LaunchRequest) (backends.Backend, error)
}
