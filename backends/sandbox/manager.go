package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/backends"
)

// Containment modes, as in backends.Confinement.Containment.
const (
	ContainCgroup    = "cgroup"
	ContainSubreaper = "subreaper"
)

// Config configures a Manager.
type Config struct {
	// Name names this daemon's cgroup tree and marks its processes; two
	// daemons with different names never touch each other's agents.
	// Required; see TreeName.
	Name string
	// CgroupParent is a cgroup v2 directory where the tree is created. ""
	// finds one: the daemon's own cgroup, then its ancestors up to the
	// delegated user@UID.service. "none" uses the subreaper fallback.
	CgroupParent string
	// StateFile records where the tree was made, so that the next start
	// sweeps it even when it would choose another place. Optional.
	StateFile string
	// Launcher is the argv that runs Launch: the agentpool binary and
	// LauncherCommand. Empty disables Landlock (cgroups still apply).
	Launcher []string
	// LauncherEnv is added to the environment of launched programs so that
	// Launcher acts as the launcher (tests: EnvLauncher=1).
	LauncherEnv []string
	// NoLandlock runs programs without the launcher — no Landlock rules,
	// no namespaces — even where the kernel has them (a benchmark's
	// baseline; never in production).
	NoLandlock bool
	// NoNamespaces runs programs under Landlock without namespaces of
	// their own, as on a machine that forbids them (tests, benchmarks).
	NoNamespaces bool
	// Logger receives what the sandbox could not do (nil = slog.Default()).
	Logger *slog.Logger
}

// TreeName returns a Config.Name unique to a daemon home directory.
func TreeName(home string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(home)))
	return "agentpool-" + hex.EncodeToString(sum[:6])
}

// Status says what confinement the machine allows.
type Status struct {
	// Containment is ContainCgroup or ContainSubreaper.
	Containment string `json:"containment"`
	// Cgroup is the daemon's cgroup tree, when there is one.
	Cgroup string `json:"cgroup,omitempty"`
	// Landlock is the kernel's Landlock ABI version (0: none).
	Landlock int `json:"landlock"`
	// Namespaces reports whether programs run in namespaces of their own
	// (user, mount, PID, IPC, network): a view of their own, their own
	// processes, and the network through the daemon's egress proxy only.
	Namespaces bool `json:"namespaces"`
	// NamespacesError says why they do not, when they do not.
	NamespacesError string `json:"namespaces_error,omitempty"`
	// Warnings say what protection is missing and why.
	Warnings []string `json:"warnings,omitempty"`
}

// Manager owns one daemon's cgroup tree (or, without cgroups, its marked
// process trees) and makes the Jails agents and terminals start in.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	root   string // the cgroup tree; "" in the subreaper fallback
	status Status

	// secrets are the system files the views hide (systemSecrets).
	secrets []string

	mu    sync.Mutex
	jails map[*Jail]struct{}
	tmp   map[string]*tmpDir

	// dirs serialises making a jail's cgroup (its parents first) with
	// removing the empty parents of a released one: without it a release
	// could remove the session's cgroup between the two mkdirs of a new
	// jail in it, which then fails.
	dirs sync.Mutex
}

type tmpDir struct {
	path string
	refs int
}

// Open finds where this daemon's processes can be contained and prepares
// it. It does not fail when no cgroup can be made: the Manager then uses
// the subreaper fallback, and Status says so.
func Open(cfg Config) (*Manager, error) {
	if cfg.Name == "" || strings.ContainsAny(cfg.Name, "/\x00") || cfg.Name == "." || cfg.Name == ".." {
		return nil, fmt.Errorf("sandbox: invalid tree name %q", cfg.Name)
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, jails: map[*Jail]struct{}{}, tmp: map[string]*tmpDir{}}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.status.Landlock = LandlockABI()
	if cfg.NoLandlock || len(cfg.Launcher) == 0 {
		m.status.Landlock = 0
	}
	if m.status.Landlock == 0 {
		m.status.Warnings = append(m.status.Warnings, "no Landlock: agents run without filesystem or network rules")
	}
	if !cfg.NoLandlock && !cfg.NoNamespaces && len(cfg.Launcher) > 0 {
		if err := probeNamespaces(cfg.Launcher, cfg.LauncherEnv); err != nil {
			m.status.NamespacesError = err.Error()
		} else {
			m.status.Namespaces = true
			m.secrets = systemSecrets()
		}
	} else {
		m.status.NamespacesError = "namespaces are off for this daemon"
	}
	if !m.status.Namespaces && m.status.Landlock > 0 {
		msg := LandlockOnlyWarning
		if m.status.NamespacesError != "" {
			msg += " (" + m.status.NamespacesError + ")"
		}
		m.status.Warnings = append(m.status.Warnings, msg)
		m.log.Warn("sandbox: " + msg)
	}
	var tried []string
	if cfg.CgroupParent != "none" {
		parents := []string{cfg.CgroupParent}
		if cfg.CgroupParent == "" {
			parents = candidateParents()
		}
		for _, parent := range parents {
			root, err := usable(parent, cfg.Name)
			if err != nil {
				tried = append(tried, fmt.Sprintf("%s: %v", parent, err))
				continue
			}
			m.root = root
			break
		}
	}
	if m.root != "" {
		m.status.Containment, m.status.Cgroup = ContainCgroup, m.root
		m.record()
	} else {
		m.status.Containment = ContainSubreaper
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return nil, fmt.Errorf("sandbox: no cgroup (%s) and no subreaper: %w", strings.Join(tried, "; "), err)
		}
		msg := "no writable cgroup v2: agents are contained by the daemon as subreaper, and a process that clears its environment can escape the restart sweep"
		if len(tried) > 0 {
			msg += " (tried " + strings.Join(tried, "; ") + ")"
		}
		m.status.Warnings = append(m.status.Warnings, msg)
		m.log.Warn("sandbox: " + msg)
	}
	return m, nil
}

// record writes the tree's path to the state file.
func (m *Manager) record() {
	if m.cfg.StateFile == "" {
		return
	}
	if err := os.WriteFile(m.cfg.StateFile, []byte(m.root+"\n"), 0o600); err != nil {
		m.log.Warn("sandbox: record cgroup tree", "file", m.cfg.StateFile, "err", err)
	}
}

// Status says how processes are confined on this machine.
func (m *Manager) Status() Status {
	s := m.status
	s.Warnings = append([]string(nil), s.Warnings...)
	return s
}

// Sweep ends every process a previous daemon with the same name left
// behind — agents, terminals and whatever they started, in their cgroups
// (the current tree and the one the state file names) or, in the fallback,
// marked in their environment — and removes the cgroups. It returns how
// many processes it killed. Call it before the first NewJail.
func (m *Manager) Sweep() (int, error) {
	var errs []error
	n := 0
	trees := []string{}
	if m.root != "" {
		trees = append(trees, m.root)
	}
	if m.cfg.StateFile != "" {
		if b, err := os.ReadFile(m.cfg.StateFile); err == nil {
			if old := strings.TrimSpace(string(b)); old != "" && old != m.root && filepath.Base(old) == m.cfg.Name {
				trees = append(trees, old)
			}
		}
	}
	for _, tree := range trees {
		ents, err := os.ReadDir(tree)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			dir := filepath.Join(tree, e.Name())
			n += len(cgroupPids(dir))
			if err := cgroupKill(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := cgroupRemove(dir); err != nil {
				errs = append(errs, err)
			}
		}
		if tree != m.root {
			_ = unix.Rmdir(tree)
		}
	}
	n += sweepMarked(m.cfg.Name+"/", nil)
	m.record()
	return n, errors.Join(errs...)
}

// Close removes the daemon's cgroup tree, as far as it is empty: jails
// still open keep theirs (and the tree), for the next start to sweep.
func (m *Manager) Close() error {
	if m.root == "" {
		return nil
	}
	// Empty cgroups only: rmdir refuses a populated one, and a session's
	// cgroup holds its agents' (empty by now) below it.
	ents, _ := os.ReadDir(m.root)
	for _, e := range ents {
		if e.IsDir() {
			_ = cgroupRemoveEmpty(filepath.Join(m.root, e.Name()))
		}
	}
	if err := unix.Rmdir(m.root); err != nil && !errors.Is(err, unix.ENOENT) {
		// Still in use by a jail left open: the next start sweeps it.
		m.log.Debug("sandbox: cgroup tree kept", "dir", m.root, "err", err)
	}
	return nil
}

// cgroupRemoveEmpty removes dir and its descendants, deepest first, as far
// as they are empty.
func cgroupRemoveEmpty(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	for _, d := range dirs {
		_ = unix.Rmdir(d)
	}
	return nil
}

// JailConfig describes one jail.
type JailConfig struct {
	// Path names the jail inside the tree, outermost first: (session,
	// agent, "agent") or (session, agent, terminal id). Each element is
	// made safe for a directory name.
	Path []string
	// Policy is the Landlock policy; nil runs the program without rules.
	Policy *Policy
	// Session, if set, gives the program a private TMPDIR shared by the
	// session's jails and removed when the last one is released.
	Session string
	// TmpRoot is where private TMPDIRs are made (required with Session).
	TmpRoot string
	// Egress is the way out of the program's network namespace; nil
	// leaves it only its loopback.
	Egress *EgressView
	// Join, if set, is the agent's jail whose namespaces the program
	// joins (a terminal of the agent's): it shares the agent's view,
	// /tmp, processes and loopback. Its Egress is the agent's.
	Join *Jail
	// Released, if set, is called once when the jail is released (the
	// launch's egress listener closes with its agent).
	Released func()
}

// NewJail makes a jail: its cgroup (created now, empty) or its fallback
// mark. The caller Prepares a command with it, starts the command, and
// Releases the jail once the command has been reaped.
func (m *Manager) NewJail(cfg JailConfig) (*Jail, error) {
	if len(cfg.Path) == 0 {
		return nil, errors.New("sandbox: jail without a path")
	}
	parts := make([]string, len(cfg.Path))
	for i, p := range cfg.Path {
		parts[i] = safeName(p)
	}
	j := &Jail{m: m, name: strings.Join(parts, "/"), policy: cfg.Policy, egress: cfg.Egress, join: cfg.Join, onRelease: cfg.Released}
	if cfg.Join != nil {
		j.egress = cfg.Join.egress
	}
	if cfg.Policy != nil && m.status.Landlock == 0 && cfg.Policy.Required {
		return nil, fmt.Errorf("sandbox %s: %w", j.name, ErrLandlockRequired)
	}
	if cfg.Policy != nil && cfg.Policy.View != nil && !m.status.Namespaces && cfg.Policy.Required {
		return nil, fmt.Errorf("sandbox %s: %w (%s)", j.name, ErrNamespacesRequired, m.status.NamespacesError)
	}
	if cfg.Session != "" {
		tmp, err := m.acquireTmp(cfg.TmpRoot, cfg.Session)
		if err != nil {
			return nil, err
		}
		j.tmpSession, j.tmp = cfg.Session, tmp
	}
	if m.root != "" {
		j.dir = filepath.Join(append([]string{m.root}, parts...)...)
		m.dirs.Lock()
		err := os.MkdirAll(j.dir, 0o755)
		m.dirs.Unlock()
		if err != nil {
			m.releaseTmp(j.tmpSession)
			return nil, fmt.Errorf("sandbox: create cgroup %s: %w", j.dir, err)
		}
		fd, err := unix.Open(j.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			_ = cgroupRemove(j.dir)
			m.releaseTmp(j.tmpSession)
			return nil, fmt.Errorf("sandbox: open cgroup %s: %w", j.dir, err)
		}
		j.fd = fd
	}
	m.mu.Lock()
	m.jails[j] = struct{}{}
	m.mu.Unlock()
	return j, nil
}

// ErrNamespacesRequired refuses a launch whose policy requires the whole
// sandbox on a machine where programs cannot have namespaces of their own.
var ErrNamespacesRequired = errors.New("the provider's sandbox is required and this machine does not let agents have namespaces of their own")

// LandlockOnlyWarning is the warning of a machine where agents run under
// Landlock without namespaces of their own.
const LandlockOnlyWarning = "Landlock only: agents can reach unix sockets and local services, and see other processes; " +
	"let the agentpool binary make user namespaces (on Ubuntu 24.04 and later an AppArmor profile with \"userns,\" for it, see docs/confinement.md; " +
	"elsewhere sysctl kernel.unprivileged_userns_clone=1) and restart the daemon"

// ErrLandlockRequired refuses a launch whose policy requires Landlock on a
// kernel without it.
var ErrLandlockRequired = errors.New("the provider's sandbox is required and this kernel has no Landlock")

// KillSession ends every process of every jail whose path starts with
// session, and removes their cgroups; jails still open are released.
func (m *Manager) KillSession(session string) error {
	m.mu.Lock()
	var js []*Jail
	prefix := safeName(session) + "/"
	for j := range m.jails {
		if strings.HasPrefix(j.name+"/", prefix) {
			js = append(js, j)
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, j := range js {
		if err := j.Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	if m.root != "" {
		dir := filepath.Join(m.root, safeName(session))
		if err := cgroupKill(dir); err != nil {
			errs = append(errs, err)
		}
	} else {
		sweepMarked(m.cfg.Name+"/"+prefix, m.leaders())
	}
	return errors.Join(errs...)
}

// acquireTmp returns the session's private TMPDIR, creating it on first use.
func (m *Manager) acquireTmp(root, session string) (string, error) {
	if root == "" {
		return "", errors.New("sandbox: a session TMPDIR needs a TmpRoot")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.tmp[session]; ok {
		t.refs++
		return t.path, nil
	}
	path := filepath.Join(root, safeName(session))
	if err := os.MkdirAll(path, 0o700); err != nil {
		return "", fmt.Errorf("sandbox: session TMPDIR: %w", err)
	}
	m.tmp[session] = &tmpDir{path: path, refs: 1}
	return path, nil
}

// releaseTmp drops one reference to the session's TMPDIR and removes it
// with the last.
func (m *Manager) releaseTmp(session string) {
	if session == "" {
		return
	}
	m.mu.Lock()
	t, ok := m.tmp[session]
	if ok {
		t.refs--
		if t.refs > 0 {
			ok = false
		} else {
			delete(m.tmp, session)
		}
	}
	m.mu.Unlock()
	if ok {
		if err := os.RemoveAll(t.path); err != nil {
			m.log.Warn("sandbox: remove session TMPDIR", "dir", t.path, "err", err)
		}
	}
}

// leaders returns the pids the Manager's jails started, which the fallback
// sweep must not reap (their exec.Cmd does).
func (m *Manager) leaders() map[int]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int]bool{}
	for j := range m.jails {
		if pid := j.leader(); pid > 0 {
			out[pid] = true
		}
	}
	return out
}

// safeName makes s usable as one directory name: characters other than
// letters, digits, '.', '_' and '-' become '_', and names that would mean
// something else are prefixed.
func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			b[i] = '_'
		}
	}
	s = string(b)
	if s == "" || s == "." || s == ".." || strings.HasPrefix(s, "cgroup.") {
		s = "_" + s
	}
	return s
}

var _ backends.Jail = (*Jail)(nil)
