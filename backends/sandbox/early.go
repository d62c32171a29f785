package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// An early launch starts a jail's launcher before its program, its policy
// or even the directory it runs in are known: the launcher makes its
// namespaces, its Go runtime starts, and it waits on a pipe (LateArg) for
// the rest, which TakePrestart sends once the caller has it. The daemon starts a
// new session's agent that way while its worktree is made: what the
// launcher does before it reads the pipe (the process's start in a new
// cgroup, the namespaces, the runtime's start) is off the session's path.
//
// Nothing the program could use is in the waiting launcher: its
// environment is the constructor's variable alone (and the test binary's
// LauncherEnv), it runs in /, and the pipe is closed before the program
// starts. A launcher whose pipe closes before a word is read exits 0.

// LateArg is the launcher's only argument when it reads its arguments,
// environment and working directory from fd 3 (lateFD) as a lateLaunch.
const LateArg = "-"

// lateFD is the pipe's descriptor in the launcher.
const lateFD = 3

// maxLateLaunch bounds the message the launcher reads from the pipe.
const maxLateLaunch = 16 << 20

// lateLaunch is what the daemon sends an early launcher: what its command
// line, environment and working directory would have been.
type lateLaunch struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
}

// Early is a launcher started ahead of its program in a jail (StartEarly);
// TakePrestart gives it the program. A jail released before that ends
// it.
type Early struct {
	procs backends.Prestart // the launcher's process and our ends of its stdio
	late  *os.File          // the pipe's write end
	nice  int
}

// StartEarly starts the jail's launcher, to wait for its program in
// namespaces of its own at niceness nice. It fails where the jail could
// not run its program that way: no cgroup (the fallback's sweep knows a
// process by its program's environment), no launcher, no namespaces.
// Once the program is known, Prepare rewrites its command and
// backends.StartProcess hands it to the launcher (see TakePrestart);
// Release ends a launcher never given one.
func (j *Jail) StartEarly(nice int) error {
	st := j.m.status
	if j.dir == "" || len(j.m.cfg.Launcher) == 0 || j.m.cfg.NoLandlock || !st.Namespaces || j.join != nil {
		return errors.New("sandbox: this jail cannot start its launcher early")
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("sandbox: early launch: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeFiles(inR, inW)
		return fmt.Errorf("sandbox: early launch: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeFiles(inR, inW, outR, outW)
		return fmt.Errorf("sandbox: early launch: %w", err)
	}
	lateR, lateW, err := os.Pipe()
	if err != nil {
		closeFiles(inR, inW, outR, outW, errR, errW)
		return fmt.Errorf("sandbox: early launch: %w", err)
	}
	launcher := j.m.cfg.Launcher
	cmd := exec.Command(launcher[0], append(slices.Clone(launcher[1:]), LateArg)...)
	cmd.Dir = "/"
	cmd.Env = append([]string{EnvUnshare + "=" + strconv.Itoa(nice)}, j.m.cfg.LauncherEnv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.ExtraFiles = []*os.File{lateR} // fd 3: lateFD
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, UseCgroupFD: true}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.released || j.cmd != nil || j.early != nil {
		closeFiles(inR, inW, outR, outW, errR, errW, lateR, lateW)
		return errors.New("sandbox: early launch: the jail is released or has its program")
	}
	cmd.SysProcAttr.CgroupFD = j.fd
	if err := cmd.Start(); err != nil {
		closeFiles(inR, inW, outR, outW, errR, errW, lateR, lateW)
		return fmt.Errorf("sandbox: early launch: %w", err)
	}
	closeFiles(inR, outW, errW, lateR)
	j.early = &Early{procs: backends.Prestart{Cmd: cmd, Stdin: inW, Stdout: outR, Stderr: errR}, late: lateW, nice: nice}
	return nil
}

// TakePrestart returns the launcher StartEarly started, for
// backends.StartProcess to start cmd in; ok is false when there is none
// (or cmd, as Prepare left it, is not a launch it can run: then it is
// ended, and cmd starts as usual). Called once Prepare has rewritten cmd.
func (j *Jail) TakePrestart(cmd *exec.Cmd) (backends.Prestart, bool) {
	j.mu.Lock()
	e := j.early
	j.early = nil
	j.mu.Unlock()
	if e == nil {
		return backends.Prestart{}, false
	}
	launcher := j.m.cfg.Launcher
	usable := cmd.Path == launcher[0] && len(cmd.Args) > len(launcher) &&
		slices.Contains(cmd.Env, EnvUnshare+"="+strconv.Itoa(e.nice))
	if !usable {
		// A launch without a view of its own (the provider's sandbox
		// off, say): the waiting launcher cannot run it.
		e.abandon()
		return backends.Prestart{}, false
	}
	env := slices.DeleteFunc(slices.Clone(cmd.Env), func(kv string) bool { return strings.HasPrefix(kv, EnvUnshare+"=") })
	dir := cmd.Dir
	if dir == "" {
		dir, _ = os.Getwd()
	}
	msg, err := json.Marshal(lateLaunch{Args: cmd.Args[len(launcher):], Env: env, Dir: dir})
	if err == nil && len(msg) > maxLateLaunch {
		err = errors.New("launch too large")
	}
	if err == nil {
		_, err = e.late.Write(msg)
	}
	if cerr := e.late.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// It reads nothing whole and exits; the usual start follows.
		j.m.log.Warn("sandbox: early launcher not given its program", "jail", j.name, "err", err)
		e.abandon()
		return backends.Prestart{}, false
	}
	j.mu.Lock()
	j.cmd = e.procs.Cmd
	j.mu.Unlock()
	return e.procs, true
}

// abandon ends an early launcher that will run nothing: it reads the
// closed pipe and exits (or is killed with its jail), and is reaped, which
// empties the cgroup.
func (e *Early) abandon() (reaped <-chan struct{}) {
	_ = e.late.Close()
	closeFiles(e.procs.Stdin, e.procs.Stdout, e.procs.Stderr)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.procs.Cmd.Wait()
	}()
	return done
}

// abandonWait is how long Release lets an abandoned launcher exit by
// itself, its namespace's first process reaped by it, before the kill
// (whose orphans only the machine's init may reap, and the cgroup waits
// for that).
const abandonWait = 500 * time.Millisecond

// readLate reads the launch an early launcher waits for from lateFD, and
// closes it. ok is false when the daemon closed it without a launch.
func readLate() (l lateLaunch, ok bool, err error) {
	f := os.NewFile(lateFD, "late")
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxLateLaunch+1))
	if err != nil {
		return l, false, fmt.Errorf("read the launch: %w", err)
	}
	if len(raw) == 0 {
		return l, false, nil
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return l, false, fmt.Errorf("bad launch: %w", err)
	}
	return l, true, nil
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}

// Configure gives a jail made without them (NewJail with no Policy, to
// start its launcher early) its policy, its way out and what to call on
// release, as NewJail would have: it refuses them as NewJail does. It is
// called before Prepare; released is called even when it fails, once the
// jail is released.
func (j *Jail) Configure(pol *Policy, egress *EgressView, released func()) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cmd != nil || j.released {
		if released != nil && j.released {
			released()
		}
		return errors.New("sandbox: configure a jail that has started its program or been released")
	}
	j.policy, j.egress, j.onRelease = pol, egress, released
	if pol != nil && j.m.status.Landlock == 0 && pol.Required {
		return fmt.Errorf("sandbox %s: %w", j.name, ErrLandlockRequired)
	}
	if pol != nil && pol.View != nil && !j.m.status.Namespaces && pol.Required {
		return fmt.Errorf("sandbox %s: %w (%s)", j.name, ErrNamespacesRequired, j.m.status.NamespacesError)
	}
	return nil
}
