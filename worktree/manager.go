package worktree

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Defaults for Config fields left zero.
const (
	// DefaultGit is the git binary, looked up in PATH.
	DefaultGit = "git"
	// DefaultAuthor is the name on commits the Manager makes.
	DefaultAuthor = "agentpool"
	// DefaultAuthorEmail is the email on commits the Manager makes.
	DefaultAuthorEmail = "agentpool@localhost"
	// DefaultMaxPatchBytes bounds the unified patch returned by Diff.
	DefaultMaxPatchBytes = 8 << 20
	// DefaultRescanAfter is how long a checkpoint of a worktree in which
	// nothing was seen to change is trusted before it is taken again by a
	// full scan.
	DefaultRescanAfter = 10 * time.Minute
)

// BranchPrefix prefixes the session id in the name of a session's branch.
const BranchPrefix = "agentpool/"

// CheckpointRefPrefix prefixes the session id in the ref that anchors the
// chain of a session's checkpoints, so that git gc keeps them.
const CheckpointRefPrefix = "refs/agentpool/checkpoints/"

// MergedRefPrefix prefixes the session id in the ref that records the
// session branch's head when Merge last merged it (see Prune): a squash
// merge leaves no other trace of it in the target branch.
const MergedRefPrefix = "refs/agentpool/merged/"

const (
	hooksDirName    = ".hooks" // under Root; never a repository namespace
	tmpDirName      = ".tmp"   // under Root; never a repository namespace
	maxSessionLen   = 128
	maxRepoNameLen  = 48
	repoHashLen     = 12
	versionTimeout  = 30 * time.Second
	namespaceSep    = "-"
	checkpointTitle = "agentpool checkpoint"
)

// Log attribute keys.
const (
	keySession = "session"
	keyRepo    = "repo"
	keyPath    = "path"
	keyBranch  = "branch"
	keyCommit  = "commit"
	keyArgs    = "args"
	keyDir     = "dir"
	keyElapsed = "elapsed"
	keyErr     = "err"
)

// Config configures a Manager.
type Config struct {
	// Root is the directory under which worktrees are created, as
	// <repo-name>-<hash of the repo path>/<session>. Required; created if
	// missing. It must not lie inside a repository that sessions use.
	Root string
	// Git is the git binary (default DefaultGit, looked up in PATH).
	Git string
	// Logger receives the Manager's logs (nil: slog.Default()).
	Logger *slog.Logger
	// Author and AuthorEmail are the identity of the commits the Manager
	// makes for itself (checkpoint anchors), and of those it makes of a
	// session's work (preserved work, merges) when the repository's
	// configuration gives no user.name and user.email; defaults
	// DefaultAuthor and DefaultAuthorEmail.
	Author      string
	AuthorEmail string
	// MaxPatchBytes bounds Diff.Patch (default DefaultMaxPatchBytes); the
	// file list and stat are always complete.
	MaxPatchBytes int
	// RescanAfter bounds how long Checkpoint answers from its change
	// tracking: when nothing has changed in a worktree since its last
	// checkpoint (as inotify reports it), Checkpoint returns that
	// checkpoint without running git, unless it is older than this.
	// Default DefaultRescanAfter; negative: no change tracking, every
	// checkpoint scans.
	RescanAfter time.Duration
	// TrustFile records which repositories' setup files the user trusted
	// (by the hash of their content; see Trust): a file in the daemon's
	// home, written with mode 0600. "" trusts no setup file: their copy
	// and command never run.
	TrustFile string
	// SetupSandbox confines trusted setup commands; nil runs them
	// unconfined (tests), and their SetupStarted event says so.
	SetupSandbox SetupSandbox
	// MirrorRoot is the directory of the mirrors of repositories given by
	// URL or as a bare repository's path (see remote.go), created mode
	// 0700 when first needed; it must not be under Root. "" refuses such
	// repositories (ErrBareRepository), as before they were supported.
	MirrorRoot string
}

// Worktree is one session's worktree.
type Worktree struct {
	// Session is the session id.
	Session string `json:"session"`
	// Repo is the top level of the user's working tree it was made from.
	Repo string `json:"repo"`
	// Path is the worktree directory.
	Path string `json:"path"`
	// Branch is the session branch, BranchPrefix + Session.
	Branch string `json:"branch"`
	// BaseCommit is the commit the branch started from.
	BaseCommit string `json:"base_commit"`
	// CreatedAt is when the worktree was created.
	CreatedAt time.Time `json:"created_at"`
	// Agent is the session's active agent, if known: the commits the
	// Manager makes of the session's work name it in a trailer. It is
	// given by the caller and not stored.
	Agent string `json:"agent,omitempty"`
}

// Manager creates, checkpoints, restores and removes session worktrees. It is
// safe for concurrent use: mutations of one repository's worktree list are
// serialised, and so are the operations on one worktree.
type Manager struct {
	root       string
	hooksDir   string
	tmpDir     string // the Manager's private files (temporary indexes)
	gitPath    string
	log        *slog.Logger
	env        []string
	userEnv    []string // of the user's own git (see call.user)
	author     Identity // the Manager's own, for Identity's default
	globalArgs []string
	maxPatch   int

	// changes lets Checkpoint skip git for unchanged worktrees; the git
	// files outside the worktree that decide a snapshot are part of its
	// fingerprint.
	changes      *changeTracker
	globalIgnore string
	globalConfig string
	gitRuns      atomic.Int64 // git commands run, for tests

	mu        sync.Mutex
	repos     map[string]*sync.Mutex  // by git common dir
	wts       map[string]*wtState     // by worktree path
	repoInfos map[string]repoInfo     // by the repository path given
	setups    map[string]*setupRun    // pending or running, by worktree path
	skipped   map[string]skippedSetup // skipped as untrusted, by worktree path
	copied    map[string][]string     // files a setup copied, by worktree path (see copied.go)

	trustFile string
	trustMu   sync.Mutex // serialises the trust record's updates
	sandbox   SetupSandbox
	mirrors   string // Config.MirrorRoot, absolute; "" for none

	fences sync.Map // session → *fenceState (see fence.go)

	identities identityCache // see Identity
}

// wtState serialises the operations on one worktree and caches the head of
// its checkpoint chain.
type wtState struct {
	mu         sync.Mutex
	anchor     string // commit at CheckpointRefPrefix+session, "" if unknown
	anchorTree string // its tree
	// seed is the tree of a worktree's state at its creation when the
	// Manager vouched for it without a scan (see seedFresh), until the
	// next checkpoint that anchors; seedGiven says that Checkpoint
	// returned it, and so that it goes first in the chain.
	seed      string
	seedGiven bool
	// viewRef is the private ref of the worktree's view (see view.go) as
	// the Manager last dealt with it (refKey: imported, found behind the
	// branch, refused, or written by the Manager); "" until then.
	viewRef string
	// paths caches the worktree's git directories (see locate); nil until
	// first located. It is read without mu, by GitPaths.
	paths atomic.Pointer[located]
}

// NewManager checks cfg, creates the root and the empty hooks directory,
// and checks the git version.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Root == "" {
		return nil, errors.New("worktree: Config.Root is required")
	}
	if cfg.Git == "" {
		cfg.Git = DefaultGit
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Author == "" {
		cfg.Author = DefaultAuthor
	}
	if cfg.AuthorEmail == "" {
		cfg.AuthorEmail = DefaultAuthorEmail
	}
	if cfg.MaxPatchBytes <= 0 {
		cfg.MaxPatchBytes = DefaultMaxPatchBytes
	}
	if cfg.RescanAfter == 0 {
		cfg.RescanAfter = DefaultRescanAfter
	}
	gitPath, err := exec.LookPath(cfg.Git)
	if err != nil {
		return nil, fmt.Errorf("worktree: find git: %w", err)
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("worktree: root: %w", err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("worktree: create root: %w", err)
	}
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return nil, fmt.Errorf("worktree: root: %w", err)
	}
	mirrors := ""
	if cfg.MirrorRoot != "" {
		if mirrors, err = filepath.Abs(cfg.MirrorRoot); err != nil {
			return nil, fmt.Errorf("worktree: mirror root: %w", err)
		}
		if err := os.MkdirAll(mirrors, 0o700); err != nil {
			return nil, fmt.Errorf("worktree: create mirror root: %w", err)
		}
		if mirrors, err = filepath.EvalSymlinks(mirrors); err != nil {
			return nil, fmt.Errorf("worktree: mirror root: %w", err)
		}
		if within(root, mirrors) || within(mirrors, root) {
			return nil, fmt.Errorf("worktree: mirror root %s and root %s must not contain each other", mirrors, root)
		}
	}
	hooks := filepath.Join(root, hooksDirName)
	if err := emptyDir(hooks); err != nil {
		return nil, fmt.Errorf("worktree: hooks directory: %w", err)
	}
	tmp := filepath.Join(root, tmpDirName)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("worktree: temporary directory: %w", err)
	}
	m := &Manager{
		root:       root,
		hooksDir:   hooks,
		tmpDir:     tmp,
		gitPath:    gitPath,
		log:        cfg.Logger,
		env:        gitEnv(os.Environ(), cfg.Author, cfg.AuthorEmail),
		author:     Identity{Name: cfg.Author, Email: cfg.AuthorEmail, Default: true},
		userEnv:    userGitEnv(os.Environ()),
		globalArgs: gitGlobalArgs(hooks),
		maxPatch:   cfg.MaxPatchBytes,
		changes:    newChangeTracker(cfg.Logger, cfg.RescanAfter),
		repos:      make(map[string]*sync.Mutex),
		wts:        make(map[string]*wtState),
		repoInfos:  make(map[string]repoInfo),
		setups:     make(map[string]*setupRun),
		skipped:    make(map[string]skippedSetup),
		copied:     make(map[string][]string),
		trustFile:  cfg.TrustFile,
		sandbox:    cfg.SetupSandbox,
		mirrors:    mirrors,
	}
	m.globalIgnore, m.globalConfig = globalGitFiles(m.env)
	ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
	defer cancel()
	if err := m.checkVersion(ctx); err != nil {
		return nil, fmt.Errorf("worktree: %w", err)
	}
	return m, nil
}

// Close releases the change tracking of worktrees (an inotify instance).
// The Manager stays usable; every later checkpoint scans.
func (m *Manager) Close() error {
	if err := m.changes.close(); err != nil {
		return fmt.Errorf("worktree: close change tracking: %w", err)
	}
	return nil
}

// Root returns the directory worktrees are created under.
func (m *Manager) Root() string { return m.root }

// emptyDir makes dir exist, empty and read-only, so that no hook can ever
// be found in it.
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("%s is not empty (it must hold no hooks)", dir)
	}
	return os.Chmod(dir, 0o555)
}

// repoLock returns the mutex serialising worktree mutations of the
// repository with the given common git dir.
func (m *Manager) repoLock(common string) *sync.Mutex {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.repos[common]
	if !ok {
		l = new(sync.Mutex)
		m.repos[common] = l
	}
	return l
}

// state returns the per-worktree state of path.
func (m *Manager) state(path string) *wtState {
	m.mu.Lock()
	defer m.mu.Unlock()
	path = filepath.Clean(path)
	s, ok := m.wts[path]
	if !ok {
		s = new(wtState)
		m.wts[path] = s
	}
	return s
}

// forget drops the per-worktree state of a removed worktree.
func (m *Manager) forget(path string) {
	m.changes.forget(filepath.Clean(path))
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.wts, filepath.Clean(path))
}

// repoInfo locates a repository.
type repoInfo struct {
	top    string // top level of the working tree; a mirror's directory
	common string // common git dir, absolute, symlinks resolved
	// remote is the repository a mirror mirrors (top and common are then
	// the mirror's directory); zero for a local repository.
	remote remote
}

// name is how a Worktree of the repository names it: the top level of
// the working tree, or the remote's URL.
func (i repoInfo) name() string {
	if i.remote.url != "" {
		return i.remote.url
	}
	return i.top
}

// repo finds the working tree that path is in, or the mirror of the
// repository path names by URL or as a bare repository's path (see
// remote.go; the mirror must exist).
func (m *Manager) repo(ctx context.Context, path string) (repoInfo, error) {
	if r, ok, err := remoteOf(path); ok {
		if err != nil {
			return repoInfo{}, err
		}
		return m.mirrorInfo(r)
	}
	info, err := m.localRepo(ctx, path)
	if errors.Is(err, ErrBareRepository) && m.mirrors != "" {
		abs, _ := filepath.Abs(path)
		return m.mirrorInfo(bareRemote(abs))
	}
	return info, err
}

// localRepo finds the working tree that path is in.
func (m *Manager) localRepo(ctx context.Context, path string) (repoInfo, error) {
	if path == "" {
		return repoInfo{}, fmt.Errorf("%w: empty path", ErrNotRepository)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return repoInfo{}, fmt.Errorf("%w: %s: %w", ErrNotRepository, path, err)
	}
	if m.mirrors != "" && within(m.mirrors, abs) {
		return repoInfo{}, fmt.Errorf("%w: %s is in the daemon's mirrors: give the repository's URL", ErrNotRepository, abs)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return repoInfo{}, &userError{msg: abs + " does not exist (pick a repository)", err: fmt.Errorf("%w: %w", ErrNotRepository, err)}
	}
	if !fi.IsDir() {
		return repoInfo{}, &userError{msg: abs + " is not a directory (pick a repository)", err: fmt.Errorf("%w: %s is not a directory", ErrNotRepository, abs)}
	}
	out, err := m.git(ctx, at(abs), "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir")
	if err != nil {
		if ctx.Err() != nil {
			return repoInfo{}, err
		}
		if bare, berr := m.git(ctx, at(abs), "rev-parse", "--is-bare-repository"); berr == nil && bare == "true" {
			return repoInfo{}, fmt.Errorf("%w: %s", ErrBareRepository, abs)
		}
		return repoInfo{}, &userError{msg: notRepositoryMessage(abs, err), err: fmt.Errorf("%w: %s: %w", ErrNotRepository, abs, err)}
	}
	top, common, ok := strings.Cut(out, "\n")
	if !ok || top == "" || common == "" {
		return repoInfo{}, fmt.Errorf("%w: %s: unexpected rev-parse output %q", ErrNotRepository, abs, out)
	}
	if resolved, err := filepath.EvalSymlinks(common); err == nil {
		common = resolved
	}
	return repoInfo{top: top, common: common}, nil
}

// notRepositoryMessage says why git found no repository at dir: none
// there, or what git refused (a repository of another user, say).
func notRepositoryMessage(dir string, err error) string {
	var ge *GitError
	if errors.As(err, &ge) && ge.Stderr != "" && !strings.Contains(ge.Stderr, "not a git repository") {
		lines := strings.Split(strings.TrimSpace(ge.Stderr), "\n")
		return "git cannot use " + dir + ": " + strings.TrimPrefix(lines[0], "fatal: ")
	}
	return dir + " is not a git repository (git init, or pick a repository)"
}

// namespace is the directory under Root holding the worktrees of the
// repository whose top level is top.
func (m *Manager) namespace(top string) string {
	sum := sha256.Sum256([]byte(top))
	return filepath.Join(m.root, repoName(top)+namespaceSep+hex.EncodeToString(sum[:])[:repoHashLen])
}

// repoName is the base name of top, made safe and short.
func repoName(top string) string {
	name := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '/' || r == '\\' {
			return '_'
		}
		return r
	}, filepath.Base(top))
	for len(name) > maxRepoNameLen {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if name == "" || name == "." || name == ".." {
		name = "repo"
	}
	return name
}

// ValidSession reports whether id can name a session: a single ref
// component (git check-ref-format rules) that is also a plain directory
// name. The error wraps ErrInvalidSession and says why.
func ValidSession(id string) error {
	bad := func(why string) error { return fmt.Errorf("%w: %q: %s", ErrInvalidSession, id, why) }
	switch {
	case id == "":
		return bad("empty")
	case len(id) > maxSessionLen:
		return bad(fmt.Sprintf("longer than %d bytes", maxSessionLen))
	case !utf8.ValidString(id):
		return bad("not valid UTF-8")
	case id == "@":
		return bad(`"@" is not a valid ref`)
	case strings.HasPrefix(id, ".") || strings.HasPrefix(id, "-"):
		return bad(`starts with "." or "-"`)
	case strings.HasSuffix(id, ".") || strings.HasSuffix(id, ".lock"):
		return bad(`ends with "." or ".lock"`)
	case strings.Contains(id, "..") || strings.Contains(id, "@{"):
		return bad(`contains ".." or "@{"`)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\/", r) {
			return bad(fmt.Sprintf("contains %q", r))
		}
	}
	return nil
}

// within reports whether path is dir or inside it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// branchOf returns wt.Branch or the default branch of its session.
func branchOf(wt Worktree) string {
	if wt.Branch != "" {
		return wt.Branch
	}
	return BranchPrefix + wt.Session
}
