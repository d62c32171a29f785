package worktree

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Kinds of SetupEvent, in the order RunSetup reports them.
const (
	// SetupCopied reports the files copied from the main checkout.
	SetupCopied = "copied"
	// SetupStarted reports that the setup command started.
	SetupStarted = "started"
	// SetupOutput carries complete lines of the command's output.
	SetupOutput = "output"
	// SetupEnded reports the end of the setup, failed or not: always the
	// last event of a setup that ran anything. A setup skipped as
	// untrusted reports SetupUntrusted alone.
	SetupEnded = "ended"
)

// Bounds of a setup command's reported output.
const (
	// maxSetupOutput bounds the output reported in SetupOutput events;
	// the rest is counted in SetupEvent.DroppedBytes.
	maxSetupOutput = 64 << 10
	// maxSetupLine bounds one reported line.
	maxSetupLine = 4 << 10
	// setupTailLines is how many last lines SetupEnded carries.
	setupTailLines = 20
	// setupWaitDelay is how long a cancelled or timed out setup command
	// has after SIGTERM before its process group is killed.
	setupWaitDelay = 5 * time.Second
)

// Causes with which a setup ends early.
var (
	errSetupRemoved = errors.New("the worktree is being removed")
	errSetupTimeout = errors.New("timed out")
)

// SetupEvent is one step of a worktree's setup, as RunSetup reports it.
type SetupEvent struct {
	// Kind is SetupUntrusted, SetupCopied, SetupStarted, SetupOutput or
	// SetupEnded.
	Kind string `json:"-"`
	// File is the setup file.
	File string `json:"file,omitempty"`
	// Repo, SHA256 and Content are the main checkout and the setup file's
	// hash and content (SetupUntrusted): the repository's own words, at
	// most 16 KiB of them (ContentTruncated says when there is more).
	Repo             string `json:"repo,omitempty"`
	SHA256           string `json:"sha256,omitempty"`
	Content          string `json:"content,omitempty"`
	ContentTruncated bool   `json:"content_truncated,omitempty"`
	// TrustedSHA256 is the hash of the content trusted before, when the
	// file changed since (SetupUntrusted).
	TrustedSHA256 string `json:"trusted_sha256,omitempty"`
	// CopyList is what the file would copy (SetupUntrusted).
	CopyList []string `json:"copy,omitempty"`
	// TrustCommand is the command that trusts the file (SetupUntrusted).
	TrustCommand string `json:"trust_command,omitempty"`
	// Confinement says how the command is confined (SetupStarted).
	Confinement *SetupConfinement `json:"confinement,omitempty"`
	// Copied lists the files copied (SetupCopied), relative to the top.
	Copied []string `json:"copied,omitempty"`
	// Skipped lists what the copy list named but was not copied.
	Skipped []SkippedCopy `json:"skipped,omitempty"`
	// Command and Timeout are the setup command (SetupStarted).
	Command []string `json:"command,omitempty"`
	Timeout string   `json:"timeout,omitempty"`
	// Output is complete lines of the command's stdout and stderr
	// (SetupOutput), bounded.
	Output string `json:"output,omitempty"`
	// OK says whether the whole setup succeeded (SetupEnded). It is in the
	// JSON of SetupEnded only (see MarshalJSON): on another kind it would
	// read as a failure.
	OK bool `json:"ok"`
	// ExitCode is the command's exit status (SetupEnded), -1 when it was
	// killed or did not start; nil without a command.
	ExitCode *int `json:"exit_code,omitempty"`
	// Error says what failed (SetupCopied, SetupEnded).
	Error string `json:"error,omitempty"`
	// Elapsed is how long the setup took (SetupEnded).
	Elapsed time.Duration `json:"elapsed_ns,omitempty"`
	// Tail is the last lines of the command's output (SetupEnded).
	Tail []string `json:"tail,omitempty"`
	// DroppedBytes counts output not reported for the bound (SetupEnded).
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
}

// MarshalJSON is the event's JSON, with "ok" only on SetupEnded, where it
// says how the setup ended (false is meaningful there, so it is never
// omitted).
func (e SetupEvent) MarshalJSON() ([]byte, error) {
	type fields SetupEvent // without this method
	v := struct {
		fields
		OK *bool `json:"ok,omitempty"` // shadows fields.OK
	}{fields: fields(e)}
	if e.Kind == SetupEnded {
		v.OK = &e.OK
	}
	return json.Marshal(v)
}

// setupRun is the pending or running setup of one worktree, from Create
// until it ended or the worktree was removed.
type setupRun struct {
	setup Setup
	top   string // the main checkout to copy from; "" for a mirror
	// remote is the URL of a repository without a main checkout (a
	// mirror's): nothing to copy from.
	remote string
	// untrusted is the setup file that was not trusted: nothing runs,
	// RunSetup reports it.
	untrusted *SetupFile
	// ctx is cancelled by stopSetup; RunSetup's command watches it.
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	once   sync.Once

	mu      sync.Mutex
	started bool
}

// finish marks the setup done.
func (r *setupRun) finish() { r.once.Do(func() { close(r.done) }) }

// addSetup registers the pending setup of the worktree at path.
func (m *Manager) addSetup(path string, info repoInfo, s Setup) {
	r := newSetupRun(info, s)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setups[filepath.Clean(path)] = r
}

// newSetupRun is the pending setup s of a worktree of the repository info.
func newSetupRun(info repoInfo, s Setup) *setupRun {
	r := &setupRun{setup: s, top: info.top, done: make(chan struct{})}
	if info.remote.url != "" {
		r.top, r.remote = "", info.remote.url
	}
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	return r
}

// setupOf returns the pending or running setup of the worktree at path.
func (m *Manager) setupOf(path string) *setupRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.setups[filepath.Clean(path)]
}

// dropSetup unregisters r if it is still the setup of path.
func (m *Manager) dropSetup(path string, r *setupRun) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.setups[filepath.Clean(path)] == r {
		delete(m.setups, filepath.Clean(path))
	}
	r.cancel(nil)
}

// stopSetup ends the setup of the worktree at path, if any, and waits
// until its command has ended.
func (m *Manager) stopSetup(path string, cause error) {
	m.forgetSkipped(path)
	r := m.setupOf(path)
	if r == nil {
		return
	}
	r.cancel(cause)
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if !started {
		m.dropSetup(path, r)
		r.finish()
	}
	<-r.done
}

// WaitSetup waits until the setup of wt that Create prepared has ended
// (whether it succeeded or not: RunSetup reports that), and returns at
// once when there is none. It returns ctx's error if ctx ends first.
func (m *Manager) WaitSetup(ctx context.Context, wt Worktree) error {
	r := m.setupOf(wt.Path)
	if r == nil {
		return nil
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the setup of session %q's worktree: %w", wt.Session, context.Cause(ctx))
	}
}

// RunSetup runs the setup that Create (or PrepareSetup) prepared for wt
// from its repository's setup file (see LoadSetup), when the user trusted
// that file's content: it copies the listed files from the main
// checkout, then runs the setup command in the worktree with its timeout,
// in its own process group, confined by Config.SetupSandbox, with the
// daemon's environment (less the variables that would point git
// elsewhere, and agentpool's own) plus AGENTPOOL_SESSION,
// AGENTPOOL_WORKTREE and AGENTPOOL_REPO. A setup file that was not trusted
// runs nothing: RunSetup reports SetupUntrusted, with what the file says
// and how to trust it, and returns that event. Each step is given to report, from the calling goroutine;
// the last is SetupEnded, which says whether it all succeeded. A failed
// copy or command is reported, not returned: RunSetup returns the
// SetupEnded event, and an error only when wt is not valid. Without a
// prepared setup it reports nothing and returns a zero event.
//
// Cancelling ctx, or removing the worktree, stops the command (SIGTERM
// to its group, SIGKILL after a grace period) and RunSetup returns once
// it has ended. A setup runs at most once.
func (m *Manager) RunSetup(ctx context.Context, wt Worktree, report func(SetupEvent)) (SetupEvent, error) {
	if err := ValidSession(wt.Session); err != nil {
		return SetupEvent{}, err
	}
	r := m.setupOf(wt.Path)
	if r == nil {
		return SetupEvent{}, nil
	}
	r.mu.Lock()
	if r.started || r.ctx.Err() != nil {
		r.mu.Unlock()
		return SetupEvent{}, nil
	}
	r.started = true
	r.mu.Unlock()
	defer r.finish()
	defer m.dropSetup(wt.Path, r)
	if r.untrusted != nil {
		ev := untrustedEvent(*r.untrusted)
		m.log.Warn("worktree setup skipped: the setup file is not trusted", keySession, wt.Session, keyRepo, r.top, "file", r.untrusted.File, "sha256", r.untrusted.SHA256)
		report(ev)
		return ev, nil
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(r.ctx, func() { cancel(context.Cause(r.ctx)) })
	defer stop()

	start := time.Now()
	s := r.setup
	end := SetupEvent{Kind: SetupEnded, File: s.File, OK: true}
	var failures []string
	if len(s.Copy) > 0 && r.remote != "" {
		report(noCopyEvent(s, r.remote))
	} else if len(s.Copy) > 0 {
		copied, skipped, err := m.copyFiles(ctx, r.top, wt.Path, s.Copy)
		ev := SetupEvent{Kind: SetupCopied, File: s.File, Copied: copied, Skipped: skipped}
		if err != nil {
			ev.Error = err.Error()
			failures = append(failures, "copy: "+err.Error())
		}
		report(ev)
	}
	if len(s.Command) > 0 && ctx.Err() == nil {
		code, tail, dropped, err := m.runSetupCommand(ctx, wt, r, s, report)
		end.ExitCode, end.Tail, end.DroppedBytes = &code, tail, dropped
		if err != nil {
			failures = append(failures, fmt.Sprintf("command %s: %v", strings.Join(s.Command, " "), err))
		}
	}
	if ctx.Err() != nil && len(failures) == 0 {
		failures = append(failures, "setup stopped: "+context.Cause(ctx).Error())
	}
	if len(failures) > 0 {
		end.OK = false
		end.Error = strings.Join(failures, "; ")
		m.log.Warn("worktree setup failed", keySession, wt.Session, keyPath, wt.Path, keyErr, end.Error)
	}
	end.Elapsed = time.Since(start)
	report(end)
	return end, nil
}

// runSetupCommand runs s.Command in wt and returns its exit code (-1 if it
// did not exit normally), the last lines of its output, how much output
// was not reported, and why it failed.
func (m *Manager) runSetupCommand(ctx context.Context, wt Worktree, r *setupRun, s Setup, report func(SetupEvent)) (int, []string, int64, error) {
	top, repo := r.top, r.top
	if r.remote != "" {
		repo = r.remote
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.Timeout, fmt.Errorf("%w after %s", errSetupTimeout, s.Timeout))
	defer cancel()
	out := &setupOutput{file: s.File, report: report}
	cmd := exec.CommandContext(ctx, s.Command[0], s.Command[1:]...)
	cmd.Dir = wt.Path
	cmd.Env = setupEnv(os.Environ(), wt, repo)
	cmd.Stdout, cmd.Stderr = out, out
	// It dies with the daemon, as agents do: a daemon killed mid-setup
	// leaves nothing writing in the worktree (what it started is the
	// cgroup's, which the next start sweeps).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = setupWaitDelay
	started := SetupEvent{Kind: SetupStarted, File: s.File, Command: s.Command, Timeout: s.Timeout.String()}
	conf, release, err := m.confineSetup(ctx, wt, top, cmd)
	if err != nil {
		report(started)
		return -1, nil, 0, err
	}
	defer release()
	started.Confinement = &conf
	report(started)
	err = cmd.Run()
	if cmd.Process != nil {
		// Whatever the command left running in its group goes with it (and
		// release ends what left the group).
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	out.flush()
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return code, out.tail, out.dropped, err
}

// setupEnv is the environment of a setup command: the daemon's (a
// trusted setup may need the user's private-registry tokens), less what
// would point git at another repository and the daemon's own secrets,
// plus where it runs.
func setupEnv(base []string, wt Worktree, top string) []string {
	env := make([]string, 0, len(base)+3)
	for _, kv := range base {
		key, _, _ := strings.Cut(kv, "=")
		switch key {
		case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
			"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_PREFIX", "GIT_NAMESPACE":
			continue
		}
		if strings.HasPrefix(key, "AGENTPOOL_") || strings.HasPrefix(key, "PG") {
			// agentpool's own (a token, an address, a data directory, a
			// store), and PostgreSQL's client variables, which may hold
			// the password of the daemon's store (PGPASSWORD, PGPASSFILE).
			continue
		}
		env = append(env, kv)
	}
	return append(env, "AGENTPOOL_SESSION="+wt.Session, "AGENTPOOL_WORKTREE="+wt.Path, "AGENTPOOL_REPO="+top)
}

// setupOutput reports a setup command's output in complete lines, up to
// maxSetupOutput bytes, and keeps its last lines. exec writes stdout and
// stderr to it from one goroutine, as they are the same writer.
type setupOutput struct {
	file     string
	report   func(SetupEvent)
	partial  []byte
	reported int
	dropped  int64
	tail     []string
}

// Write reports the complete lines of p.
func (o *setupOutput) Write(p []byte) (int, error) {
	o.partial = append(o.partial, p...)
	i := strings.LastIndexByte(string(o.partial), '\n')
	if i < 0 {
		if len(o.partial) > maxSetupLine {
			o.lines(string(o.partial))
			o.partial = o.partial[:0]
		}
		return len(p), nil
	}
	o.lines(string(o.partial[:i]))
	o.partial = append(o.partial[:0], o.partial[i+1:]...)
	return len(p), nil
}

// flush reports an unterminated last line.
func (o *setupOutput) flush() {
	if len(o.partial) > 0 {
		o.lines(string(o.partial))
		o.partial = nil
	}
}

// lines reports text (lines without their last newline), bounded.
func (o *setupOutput) lines(text string) {
	ls := strings.Split(text, "\n")
	for i, l := range ls {
		if len(l) > maxSetupLine {
			o.dropped += int64(len(l) - maxSetupLine)
			l = l[:maxSetupLine] + "…"
			ls[i] = l
		}
		o.tail = append(o.tail, l)
	}
	if n := len(o.tail) - setupTailLines; n > 0 {
		o.tail = append(o.tail[:0:0], o.tail[n:]...)
	}
	text = strings.Join(ls, "\n")
	room := maxSetupOutput - o.reported
	if room <= 0 {
		o.dropped += int64(len(text)) + 1
		return
	}
	if len(text) > room {
		o.dropped += int64(len(text) - room)
		text = text[:room]
	}
	o.reported += len(text) + 1
	o.report(SetupEvent{Kind: SetupOutput, File: o.file, Output: text})
}
