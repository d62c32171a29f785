package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Defaults for the zero fields of Config.
const (
	// DefaultDebounce is how long the watcher waits after the last change
	// of the file before reading it, so that a burst of events (truncate,
	// write, rename) becomes one reload.
	DefaultDebounce = 25 * time.Millisecond
	// DefaultPollInterval is how often the file is read when fsnotify is
	// not available.
	DefaultPollInterval = time.Second
	// DefaultProbeTTL is the age after which a probe result is refreshed.
	DefaultProbeTTL = 24 * time.Hour
	// DefaultProbeTimeout bounds one probe, from spawn to stop.
	DefaultProbeTimeout = 30 * time.Second
	// DefaultProbeConcurrency is how many probes may run at once; each
	// spawns a real agent, which can take hundreds of MB.
	DefaultProbeConcurrency = 2
)

// Internal timing and sizes.
const (
	// maxDebounceFactor caps the debounce of a stream of events that
	// never pauses at this many Debounce periods after the first event.
	maxDebounceFactor = 4
	// probeCheckInterval is how often Run looks for stale probes.
	probeCheckInterval = time.Minute
	// subscriberBuffer is the number of changes a subscriber may fall
	// behind before it is dropped.
	subscriberBuffer = 16
)

// Prober runs the tier-2 check of an ACP provider: spawn it, initialize,
// session/new in spec.Dir (a temporary directory the registry creates and
// removes), collect what the agent reports, stop it. Probe must return
// soon after ctx is done, and must have stopped the agent when it returns.
type Prober interface {
	Probe(ctx context.Context, spec backends.Spec) (backends.Info, error)
}

// Config configures a Registry. The zero value of every field but Path is
// usable.
type Config struct {
	// Path is the providers.json file. It need not exist: a missing file
	// means the built-ins only. "" means the built-ins only, never watched.
	Path string
	// SelfPath is the agentpool binary, launched with "demo-agent" for the
	// demo provider. Default: os.Executable().
	SelfPath string
	// PathEnv is the PATH searched for command[0]. Default: $PATH.
	PathEnv string
	// Home is the directory "~/" stands for in commands and sandbox
	// paths: the daemon user's home. Default: os.UserHomeDir(), else the
	// user database's entry.
	Home string
	// Debounce is the quiet time after a file event before the file is
	// read. Default DefaultDebounce.
	Debounce time.Duration
	// PollInterval is the period of the polling fallback. Default
	// DefaultPollInterval.
	PollInterval time.Duration
	// ForcePolling makes Run poll as if fsnotify could not start.
	ForcePolling bool
	// SIGHUP makes Run reload (and look commands up again) on SIGHUP.
	SIGHUP bool
	// Trust, when set, vets the providers file each time it is read (by
	// New, every reload and Patch), before it is opened; it is given
	// Path. An error rejects the file as invalid JSON would: the error's
	// message is the snapshot's Diagnostic, the last good config stays
	// in force, and Patch refuses to edit the file. An error wrapping
	// fs.ErrNotExist means the file is missing. The daemon uses it to
	// refuse a file that another user owns or can write.
	Trust func(path string) error
	// Prober runs tier-2 probes; nil disables them.
	Prober Prober
	// ProbeTTL is the age after which Run refreshes a probe result.
	// Default DefaultProbeTTL; negative: probe only on demand.
	ProbeTTL time.Duration
	// ProbeTimeout bounds one probe. Default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// ProbeDir is where each probe's empty working directory is made
	// (default os.TempDir()); the daemon gives its own tmp directory,
	// which it empties at start, so that a probe cut short by a kill
	// leaves nothing behind for long.
	ProbeDir string
	// ProbeConcurrency bounds the probes running at once. Default
	// DefaultProbeConcurrency.
	ProbeConcurrency int
	// SandboxNotes, if set, returns the grants of a provider's sandbox
	// that will be refused whatever the session (the home, a secret, the
	// daemon's home), shown in ProviderStatus.SandboxNotes. It is called
	// when a provider's spec changes, with the registry's lock held: it
	// must not call the registry.
	SandboxNotes func(spec backends.Spec) []backends.SandboxNote
	// Logger receives reloads, rejected files and probe results. Default
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// withDefaults returns a copy of c with defaults filled in, or an error
// naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.Path != "" {
		abs, err := filepath.Abs(c.Path)
		if err != nil {
			return c, fmt.Errorf("registry config: path %q: %w", c.Path, err)
		}
		c.Path = abs
	}
	if c.SelfPath == "" {
		self, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("registry config: find own executable: %w", err)
		}
		c.SelfPath = self
	}
	if !filepath.IsAbs(c.SelfPath) {
		return c, fmt.Errorf("registry config: self path %q is not absolute", c.SelfPath)
	}
	if c.PathEnv == "" {
		c.PathEnv = os.Getenv("PATH")
	}
	if c.Home == "" {
		home, err := userHome()
		if err != nil {
			return c, fmt.Errorf("registry config: find home directory (set Config.Home): %w", err)
		}
		c.Home = home
	}
	if !filepath.IsAbs(c.Home) {
		return c, fmt.Errorf("registry config: home %q is not absolute", c.Home)
	}
	c.Home = filepath.Clean(c.Home)
	switch {
	case c.Debounce < 0:
		return c, fmt.Errorf("registry config: negative debounce %v", c.Debounce)
	case c.PollInterval < 0:
		return c, fmt.Errorf("registry config: negative poll interval %v", c.PollInterval)
	case c.ProbeTimeout < 0:
		return c, fmt.Errorf("registry config: negative probe timeout %v", c.ProbeTimeout)
	case c.ProbeConcurrency < 0:
		return c, fmt.Errorf("registry config: negative probe concurrency %d", c.ProbeConcurrency)
	}
	if c.Debounce == 0 {
		c.Debounce = DefaultDebounce
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ProbeTTL == 0 {
		c.ProbeTTL = DefaultProbeTTL
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	if c.ProbeConcurrency == 0 {
		c.ProbeConcurrency = DefaultProbeConcurrency
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// Log attribute keys.
const (
	logProvider = "provider"
	logFile     = "file"
	logVersion  = "version"
	logError    = "error"
	logChange   = "change"
	logDuration = "duration"
)

// userHome returns $HOME, or the home directory of the user database's
// entry for the current user when $HOME is not set.
func userHome() (string, error) {
	home, err := os.UserHomeDir()
	if err == nil {
		return home, nil
	}
	u, uerr := user.Current()
	if uerr != nil || u.HomeDir == "" {
		return "", errors.Join(err, uerr)
	}
	return u.HomeDir, nil
}
