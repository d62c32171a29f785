package pool_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	"github.com/agentpool/agentpool/store"
	"github.com/agentpool/agentpool/worktree"
)

func TestMain(m *testing.M) {
	agenttest.Dispatch()
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("os/signal.loop"))
}

// gitEnv makes git independent of the machine's configuration.
var gitEnv = []string{"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
	"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com"}

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), gitEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func newRepo(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# test repo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", "README.md")
	git(t, dir, "commit", "-q", "-m", "init")
	return dir
}

// env is a pool built from real parts.
type env struct {
	// probedOK, when set (unix nanoseconds), is when a probe of every
	// provider last succeeded, as the pool's Resolver says (probeOK).
	probedOK atomic.Int64
	t        testing.TB
	dir      string
	dbPath   string
	provPath string
	repo     string
	st       *store.Store
	reg      *registry.Registry
	wt       *worktree.Manager
	p        *pool.Pool
	cfg      pool.Config
	// linger is the store's FlushInterval (0: the store's default); set
	// it, then shutdown and open, to reopen with it.
	linger time.Duration
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// wrapStore, when set, wraps the pool's store at open.
	wrapStore func(pool.Store) pool.Store
	// wrapUsage, when set, wraps the pool's usage store at open.
	wrapUsage func(pool.UsageStore) pool.UsageStore
	// launcher, when set, is the pool's Launcher (else wiring's, with
	// no confinement).
	launcher pool.Launcher
}

// providerEntry defines a fake provider running script s.
func providerEntry(s agenttest.Script) map[string]any {
	exe, _ := os.Executable()
	raw, _ := json.Marshal(s)
	return map[string]any{"extends": "acp", "command": []string{exe},
		"env": map[string]string{agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(raw)}}
}

func writeProviders(t testing.TB, path string, providers map[string]any) {
	t.Helper()
	b, err := json.MarshalIndent(map[string]any{"version": 1, "providers": providers}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newEnv(t testing.TB, providers map[string]any, tweak func(*pool.Config)) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir()}
	e.dbPath = filepath.Join(e.dir, "agentpool.db")
	e.provPath = filepath.Join(e.dir, "providers.json")
	e.repo = newRepo(t)
	writeProviders(t, e.provPath, providers)
	var err error
	e.wt, err = worktree.NewManager(worktree.Config{Root: filepath.Join(e.dir, "worktrees"), TrustFile: filepath.Join(e.dir, "trusted.json")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.wt.Close() })
	e.reg, err = registry.New(registry.Config{Path: e.provPath, Debounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = e.reg.Run(ctx) }()
	e.cfg = pool.Config{MemoryBudget: -1}
	if tweak != nil {
		tweak(&e.cfg)
	}
	e.open()
	t.Cleanup(e.close)
	return e
}

// probeOK is the env's registry, whose probes succeeded when the test
// says (env.probedOK).
type probeOK struct {
	*registry.Registry
	e *env
}

var _ pool.ProbeReporter = probeOK{}

func (r probeOK) LastProbeOK(id string) time.Time {
	if n := r.e.probedOK.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return r.Registry.LastProbeOK(id)
}

// open opens the store and a new pool over it.
func (e *env) open() {
	t := e.t
	var err error
	e.st, err = store.Open(context.Background(), store.Config{Path: e.dbPath, FlushInterval: e.linger})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Store = wiring.Store{S: e.st}
	cfg.Usage = wiring.Usage{S: e.st}
	if cfg.Reviews == nil {
		cfg.Reviews = wiring.Reviews{S: e.st}
	}
	if e.wrapStore != nil {
		cfg.Store = e.wrapStore(cfg.Store)
	}
	if e.wrapUsage != nil {
		cfg.Usage = e.wrapUsage(cfg.Usage)
	}
	cfg.Worktrees = wiring.Worktrees{M: e.wt}
	cfg.Resolver = probeOK{e.reg, e}
	cfg.Launcher = wiring.Launcher{}
	if e.launcher != nil {
		cfg.Launcher = e.launcher
	}
	e.p, err = pool.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// shutdown ends the pool and closes the store.
func (e *env) shutdown() {
	if e.p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.p.Shutdown(ctx); err != nil {
		e.t.Errorf("Shutdown: %v", err)
	}
	if err := e.st.Close(); err != nil {
		e.t.Errorf("store Close: %v", err)
	}
	e.p = nil
}

func (e *env) close() {
	e.shutdown()
	e.cancel()
	e.wg.Wait()
	_ = e.reg.Close()
}

func (e *env) session(agent string) pool.Session {
	e.t.Helper()
	s, err := e.p.Create(context.Background(), pool.CreateRequest{Repo: e.repo, Agent: agent})
	if err != nil {
		e.t.Fatalf("Create: %v", err)
	}
	return s
}

func (e *env) prompt(session, agent, text string) pool.Turn {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := e.p.Prompt(ctx, pool.PromptRequest{Session: session, Agent: agent, Text: text})
	if err != nil {
		e.t.Fatalf("Prompt(%s, %s): %v", session, agent, err)
	}
	return t
}

// events returns the session's events published so far (and so queued to
// the store, which delivers them once written).
func (e *env) events(session string) []backends.Event {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Events reach subscribers once stored: wait for those queued.
	if err := e.st.Flush(ctx); err != nil {
		e.t.Fatal(err)
	}
	sub, err := e.p.Subscribe(ctx, session, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	defer sub.Close()
	var out []backends.Event
	for head, last := sub.Head(), int64(0); last < head; {
		evs, err := sub.Next(ctx, 0)
		if err != nil {
			e.t.Fatalf("events(%s): Next after seq %d of %d: %v", session, last, head, err)
		}
		for _, ev := range evs {
			if last = ev.Seq; ev.Seq <= head {
				out = append(out, ev)
			}
		}
	}
	return out
}

func countType(evs []backends.Event, typ backends.EventType) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
