package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/backends"
)

// Jail is where one program runs: a cgroup of its own (or a marked process
// tree), and the Landlock policy its launcher applies. It implements
// backends.Jail and acpfs.Jail.
type Jail struct {
	m          *Manager
	name       string
	policy     *Policy
	dir        string // the cgroup; "" in the fallback
	fd         int    // open on dir while the jail lives
	tmp        string
	tmpSession string
	egress     *EgressView
	join       *Jail
	onRelease  func()

	mu       sync.Mutex
	cmd      *exec.Cmd
	early    *Early // the launcher StartEarly started, until taken
	released bool
}

// Prepare makes cmd start inside the jail: directly in its cgroup, through
// the launcher when there is a policy and Landlock, with the jail's mark
// and TMPDIR in its environment. cmd.SysProcAttr's other fields are kept.
func (j *Jail) Prepare(cmd *exec.Cmd) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.released {
		return errors.New("sandbox: jail released")
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	// Only this jail decides whether its launcher makes namespaces or
	// joins an agent's: never a variable the daemon's own environment or
	// the caller's passed on.
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, EnvUnshare+"=") || strings.HasPrefix(kv, EnvNsenter+"=")
	})
	env = append(env, EnvJail+"="+j.m.cfg.Name+"/"+j.name)
	if j.tmp != "" {
		env = append(env, "TMPDIR="+j.tmp)
	}
	if j.dir != "" {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = j.fd
	}
	if pol := j.launchPolicy(); pol != nil {
		p := *pol
		if j.tmp != "" {
			p.Write = append(p.Write[:len(p.Write):len(p.Write)], j.tmp)
		}
		if p.View != nil && j.join != nil {
			// The agent's namespaces, view and all, are joined as they are.
			pid := j.join.leader()
			if pid == 0 {
				return errors.New("sandbox: the agent whose namespaces a terminal joins is not running")
			}
			mnt, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
			if err != nil {
				return fmt.Errorf("sandbox: the agent whose namespaces a terminal joins: %w", err)
			}
			p.View, p.Joined = nil, mnt
			env = append(egressEnv(env, j.egress), EnvNsenter+"="+strconv.Itoa(pid))
		}
		if p.View != nil {
			v := *p.View
			v.Tmp, v.Egress = j.tmp, j.egress
			// Once each: the system's secrets include the files every
			// view hides, and each mount costs the launch time.
			v.Hide = slices.Compact(slices.Sorted(slices.Values(append(slices.Clip(v.Hide), j.m.secrets...))))
			p.View = &v
			g, err := prepareGit(v.Git)
			if err != nil {
				return fmt.Errorf("sandbox: %w", err)
			}
			v.Git = g
			env = append(egressEnv(env, v.Egress), EnvUnshare+"="+strconv.Itoa(p.Nice))
		}
		raw, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("sandbox: policy: %w", err)
		}
		path := cmd.Path
		if path == "" || !strings.HasPrefix(path, "/") {
			if lp, err := exec.LookPath(path); err == nil {
				path = lp
			}
		}
		launcher := j.m.cfg.Launcher
		args := append([]string{}, launcher...)
		args = append(args, string(raw), path)
		args = append(args, cmd.Args...)
		cmd.Path = launcher[0]
		cmd.Args = args
		cmd.Err = nil
		env = append(env, j.m.cfg.LauncherEnv...)
	}
	cmd.Env = env
	j.cmd = cmd
	return nil
}

// launchPolicy is the policy the launcher applies, nil to start the
// program directly: its Landlock rules, in a view of its own where the
// machine allows namespaces; without a policy (the provider's sandbox
// off), no rules and no view but still no capability and no-new-privs.
func (j *Jail) launchPolicy() *Policy {
	st := j.m.status
	if len(j.m.cfg.Launcher) == 0 || j.m.cfg.NoLandlock {
		return nil
	}
	if j.policy == nil {
		return &Policy{NoRules: true}
	}
	if st.Landlock == 0 && !st.Namespaces {
		return &Policy{NoRules: true}
	}
	p := *j.policy
	if !st.Namespaces {
		p.View = nil
	}
	if st.Landlock == 0 {
		p.NoRules = true
	}
	return &p
}

// GitLayerPrefix starts the name of each launch's layer in a git view's
// ObjectsUpper (and ObjectsWork): overlayfs wants one mount per upper
// directory, and a session's agents and setups each mount their own, so
// each gets ObjectsUpper/<GitLayerPrefix><id>. Whoever imports the
// agent's objects reads every layer.
const GitLayerPrefix = "layer-"

// prepareGit makes the directories a git view is mounted on, when git has
// not yet made them (a branch whose refs are all packed), and this
// launch's own layer of the object overlay; it returns the mounts with
// that layer.
func prepareGit(g *GitMounts) (*GitMounts, error) {
	if g == nil {
		return nil, nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	layer := GitLayerPrefix + hex.EncodeToString(b[:])
	out := *g
	out.View.ObjectsUpper = filepath.Join(g.View.ObjectsUpper, layer)
	out.View.ObjectsWork = filepath.Join(g.View.ObjectsWork, layer)
	for _, d := range []string{g.Refs, g.Logs, g.View.Refs, g.View.Logs, out.View.ObjectsUpper, out.View.ObjectsWork} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("git view: %w", err)
		}
	}
	return &out, nil
}

// leader returns the pid of the command started in the jail, 0 if none.
func (j *Jail) leader() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cmd == nil || j.cmd.Process == nil {
		return 0
	}
	return j.cmd.Process.Pid
}

// Kill SIGKILLs every process in the jail, whatever its session or process
// group, and waits until none is left.
func (j *Jail) Kill() error {
	if j.dir != "" {
		return cgroupKill(j.dir)
	}
	sweepMarked(j.m.cfg.Name+"/"+j.name, j.m.leaders())
	return nil
}

// Release kills what is left in the jail, removes its cgroup and drops its
// TMPDIR reference. It is idempotent.
func (j *Jail) Release() error {
	j.mu.Lock()
	if j.released {
		j.mu.Unlock()
		return nil
	}
	j.released = true
	early := j.early
	j.early = nil
	j.mu.Unlock()
	if early != nil {
		select {
		case <-early.abandon():
		case <-time.After(abandonWait):
		}
	}
	err := j.Kill()
	if j.dir != "" {
		_ = unix.Close(j.fd)
		if rerr := cgroupRemove(j.dir); rerr != nil && err == nil {
			err = rerr
		}
		// The session's and agent's cgroups go with their last jail.
		j.m.dirs.Lock()
		for dir := parentDir(j.dir); dir != j.m.root && strings.HasPrefix(dir, j.m.root+"/"); dir = parentDir(dir) {
			if unix.Rmdir(dir) != nil {
				break
			}
		}
		j.m.dirs.Unlock()
	}
	j.m.mu.Lock()
	delete(j.m.jails, j)
	j.m.mu.Unlock()
	j.m.releaseTmp(j.tmpSession)
	if j.onRelease != nil {
		j.onRelease()
	}
	return err
}

// Describe says how the jail confines its program.
func (j *Jail) Describe() backends.Confinement {
	c := backends.Confinement{Containment: j.m.status.Containment}
	if j.dir != "" {
		c.Cgroup = j.dir
	}
	var warn []string
	if j.dir == "" {
		warn = append(warn, "no cgroup: contained by the daemon as subreaper")
	}
	switch {
	case j.policy == nil:
		warn = append(warn, "sandbox disabled for this provider: no Landlock rules")
	case j.m.status.Landlock == 0 && !j.m.status.Namespaces:
		warn = append(warn, "no Landlock on this kernel: filesystem and network unconfined")
	default:
		c.Namespaces = j.m.status.Namespaces && j.policy.View != nil
		if !c.Namespaces {
			warn = append(warn, LandlockOnlyWarning)
		}
		c.Landlock = j.m.status.Landlock
		c.Network = j.policy.Network
		if c.Namespaces && j.egress != nil && j.egress.Network != "" {
			c.Network = j.egress.Network // the proxy's, not Landlock's
		}
		if c.Network != backends.NetworkAll && c.Network != "" && c.Landlock < 4 && !c.Namespaces {
			warn = append(warn, fmt.Sprintf("network %q needs Landlock ABI 4, the kernel has %d", c.Network, c.Landlock))
		}
	}
	if c.Network == "" {
		c.Network = backends.NetworkAll
	}
	c.Warning = strings.Join(warn, "; ")
	return c
}

// TmpDir is the jail's private TMPDIR, "" without one.
func (j *Jail) TmpDir() string { return j.tmp }

func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}
