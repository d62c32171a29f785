package attempts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
)

// Pool is what the Manager needs of the agent pool; *pool.Pool satisfies
// it. A cancelled ctx ends the call.
type Pool interface {
	Create(ctx context.Context, req pool.CreateRequest) (pool.Session, error)
	Get(ctx context.Context, id string) (pool.Session, error)
	Close(ctx context.Context, id string, discard bool) (pool.CloseResult, error)
	StartPrompt(ctx context.Context, req pool.PromptRequest) (pool.Turn, error)
	WaitTurn(ctx context.Context, session string, turn int64) (pool.Turn, error)
	Diff(ctx context.Context, session string, turn int64) (pool.Diff, error)
	Merge(ctx context.Context, session string, req pool.MergeRequest) (pool.MergeResult, error)
	// Pending lists the session's permission requests waiting for an
	// answer.
	Pending(session string) []permission.Pending
	// SubscribeAll returns the daemon-wide stream of events (permission
	// requests among them) from now on.
	SubscribeAll() *pool.Subscription
}

// Git is what the Manager needs of git.
type Git interface {
	// ResolveBase resolves base ("" for HEAD) of repo to a commit, and
	// names the local branch a pick merges into ("" if none).
	ResolveBase(ctx context.Context, repo, base string) (commit, branch string, err error)
	// RunCheck runs command in the session's worktree confined like a
	// trusted setup command, for at most timeout.
	RunCheck(ctx context.Context, wt pool.Worktree, command string, timeout time.Duration) CheckOutcome
}

// CheckOutcome is what a check command gave.
type CheckOutcome struct {
	// ExitCode is -1 when it did not exit normally.
	ExitCode int
	Output   string
	// Confined says how it was confined (containment, Landlock, network,
	// and what confinement is missing).
	Confined string
	// Error says why it did not run to its end.
	Error string
}

// Store keeps attempt sets across restarts.
type Store interface {
	SaveAttemptSet(ctx context.Context, id string, createdAt time.Time, body []byte) error
	ListAttemptSets(ctx context.Context) ([][]byte, error)
}

// Config configures a Manager. Pool and Git are required.
type Config struct {
	Pool Pool
	Git  Git
	// Store, if set, keeps the sets across restarts.
	Store Store
	// Known reports whether agent is a configured provider; nil knows all.
	Known func(agent string) bool
	// CheckTimeout bounds a check command (default DefaultCheckTimeout).
	CheckTimeout time.Duration
	Logger       *slog.Logger
}

// Manager runs attempt sets. Close waits for the goroutines it started.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	sets   map[string]*Set
	// picking holds the sets whose pick is under way.
	picking map[string]bool
	changed chan struct{}
}

// New returns a Manager, loading the stored sets: attempts that had not
// ended when the previous daemon stopped are marked failed, interrupted.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.Pool == nil || cfg.Git == nil {
		return nil, errors.New("attempts: Pool and Git are required")
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, sets: map[string]*Set{}, picking: map[string]bool{}, changed: make(chan struct{})}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if cfg.Store != nil {
		if err := m.load(ctx); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Close stops the running attempts' bookkeeping (their sessions go on) and
// waits for it.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// Start validates req, resolves its base once to a commit, creates one
// session per attempt on that commit and prompts them all; it returns at
// once with the set, its attempts going on in the background. A
// *FieldError names what is wrong with req.
func (m *Manager) Start(ctx context.Context, req Request) (Set, error) {
	agents, err := m.validate(req)
	if err != nil {
		return Set{}, err
	}
	commit, into, err := m.cfg.Git.ResolveBase(ctx, req.Repo, req.Base)
	if err != nil {
		if req.Base == "" {
			return Set{}, &FieldError{Field: "repo", Message: err.Error()}
		}
		return Set{}, &FieldError{Field: "base", Message: err.Error()}
	}
	s := &Set{ID: "att-" + randomID(), Title: req.Title, Prompt: req.Prompt, Repo: req.Repo, Base: req.Base,
		BaseCommit: commit, Into: into, Check: req.Check, State: SetRunning, CreatedAt: time.Now().UTC()}
	for _, a := range agents {
		att := Attempt{Agent: a, State: AttemptStarting}
		if req.Check != "" {
			att.Check = &Check{State: CheckPending, ExitCode: -1}
		}
		s.Attempts = append(s.Attempts, att)
	}
	// Sessions first, so that the set answered names them.
	for i := range s.Attempts {
		title := req.Title
		if title == "" {
			title = firstLine(req.Prompt, 60)
		}
		sess, err := m.cfg.Pool.Create(ctx, pool.CreateRequest{Repo: req.Repo, BaseRef: commit, Agent: s.Attempts[i].Agent,
			Title: fmt.Sprintf("%s [attempt %d/%d]", title, i+1, len(s.Attempts))})
		if err != nil {
			for _, a := range s.Attempts[:i] {
				if _, cerr := m.cfg.Pool.Close(context.WithoutCancel(ctx), a.Session, true); cerr != nil {
					m.log.Warn("close an attempt's session after a failed start", "session", a.Session, "err", cerr)
				}
			}
			return Set{}, fmt.Errorf("create the session of attempt %d (%s): %w", i+1, s.Attempts[i].Agent, err)
		}
		s.Attempts[i].Session = sess.ID
	}
	m.mu.Lock()
	m.sets[s.ID] = s
	out := s.clone()
	m.mu.Unlock()
	m.save(s.ID)
	for i := range s.Attempts {
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.run(s.ID, i) }()
	}
	return out, nil
}

// validate checks req and returns the agent of each attempt.
func (m *Manager) validate(req Request) ([]string, error) {
	if strings.TrimSpace(req.Prompt) == "" {
		return nil, &FieldError{Field: "prompt", Message: "a prompt is required"}
	}
	if req.Repo == "" || !strings.HasPrefix(req.Repo, "/") {
		return nil, &FieldError{Field: "repo", Message: "an absolute path of a git repository is required"}
	}
	var agents []string
	switch {
	case len(req.Agents) > 0 && (req.Agent != "" || req.N != 0):
		return nil, &FieldError{Field: "agents", Message: "give either \"agents\" or \"agent\" with \"n\", not both"}
	case len(req.Agents) > 0:
		agents = req.Agents
	case req.Agent != "":
		n := req.N
		if n == 0 {
			n = 1
		}
		if n < 1 || n > MaxAttempts {
			return nil, &FieldError{Field: "n", Message: fmt.Sprintf("n must be between 1 and %d", MaxAttempts)}
		}
		for range n {
			agents = append(agents, req.Agent)
		}
	default:
		return nil, &FieldError{Field: "agents", Message: "give \"agents\" (a list) or \"agent\" with \"n\""}
	}
	if len(agents) > MaxAttempts {
		return nil, &FieldError{Field: "agents", Message: fmt.Sprintf("at most %d attempts", MaxAttempts)}
	}
	field := "agents"
	if req.Agent != "" {
		field = "agent"
	}
	for _, a := range agents {
		if a == "" {
			return nil, &FieldError{Field: field, Message: "an agent id is empty"}
		}
		if m.cfg.Known != nil && !m.cfg.Known(a) {
			return nil, &FieldError{Field: field, Message: fmt.Sprintf("unknown agent %q", a)}
		}
	}
	return agents, nil
}

// List returns every set, newest first, with the permission requests its
// attempts wait for.
func (m *Manager) List() []Set {
	m.mu.Lock()
	out := make([]Set, 0, len(m.sets))
	for _, s := range m.sets {
		out = append(out, s.clone())
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	for i := range out {
		m.withPending(&out[i])
	}
	return out
}

// Get returns the set id, with the permission requests its attempts wait
// for, or ErrNotFound.
func (m *Manager) Get(id string) (Set, error) {
	m.mu.Lock()
	s, ok := m.sets[id]
	if !ok {
		m.mu.Unlock()
		return Set{}, fmt.Errorf("%q: %w", id, ErrNotFound)
	}
	out := s.clone()
	m.mu.Unlock()
	m.withPending(&out)
	return out, nil
}

// Wait returns the set id once it is no longer running or one of its
// attempts waits for a permission answer (which its caller must give for
// the set to go on), or as it is when ctx ends.
func (m *Manager) Wait(ctx context.Context, id string) (Set, error) {
	for {
		// Subscribed before the requests are read: one asked after is
		// on the stream.
		sub := m.cfg.Pool.SubscribeAll()
		m.mu.Lock()
		s, ok := m.sets[id]
		if !ok {
			m.mu.Unlock()
			return Set{}, fmt.Errorf("%q: %w", id, ErrNotFound)
		}
		out, ch := s.clone(), m.changed
		m.mu.Unlock()
		m.withPending(&out)
		if out.State != SetRunning || out.asks() {
			return out, nil
		}
		if !m.waitChange(ctx, ch, sub, &out) {
			return out, nil
		}
	}
}

// waitChange waits until ch is closed (the set changed) or sub brings a
// permission request of an attempt of set, and returns true; or returns
// false when ctx ends first.
func (m *Manager) waitChange(ctx context.Context, ch <-chan struct{}, sub *pool.Subscription, set *Set) bool {
	sessions := map[string]bool{}
	for _, a := range set.Attempts {
		sessions[a.Session] = true
	}
	wctx, cancel := context.WithCancel(ctx)
	asked := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			evs, err := sub.Next(wctx, 0)
			if errors.Is(err, pool.ErrSlowSubscriber) {
				close(asked) // it fell behind: look again, on a new stream
				return
			}
			if err != nil {
				return // ctx ended, or the pool is closing: the set's changes still wake the wait
			}
			for _, ev := range evs {
				if ev.Type == backends.EventPermissionRequest && sessions[ev.Session] {
					close(asked)
					return
				}
			}
		}
	})
	defer func() { cancel(); wg.Wait() }()
	select {
	case <-ch:
	case <-asked:
	case <-ctx.Done():
		return false
	}
	return true
}

// withPending fills the permission requests each open attempt of s waits
// for.
func (m *Manager) withPending(s *Set) {
	for i, a := range s.Attempts {
		if a.Session != "" && !a.Closed {
			s.Attempts[i].PendingPermissions = m.cfg.Pool.Pending(a.Session)
		}
	}
}

// update changes the set id under the lock, wakes the waiters and stores it.
func (m *Manager) update(id string, f func(s *Set)) {
	m.mu.Lock()
	s, ok := m.sets[id]
	if !ok {
		m.mu.Unlock()
		return
	}
	f(s)
	if s.State == SetRunning && s.ended() {
		s.State = SetDone
	}
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
	m.save(id)
}

// randomID returns 8 random hex digits.
func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// firstLine returns the first line of s, at most n runes.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
