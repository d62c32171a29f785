package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentpool/agentpool/backends"
)

// Snapshot is the registry as one immutable value: what the file said when
// last read, and the status of every provider. The registry never changes
// a Snapshot it handed out; callers must not change it either (its slices
// and pointers are shared).
type Snapshot struct {
	// Version increases by one on every change of the snapshot.
	Version int64 `json:"version"`
	// ETag identifies the bytes of the file as last read (even if they
	// were rejected), as a quoted strong HTTP entity tag; when there is
	// no file it is `"absent"`, quotes included. Give it to Patch as
	// ifMatch.
	ETag string `json:"etag"`
	// File is the providers file, "" when none is configured.
	File string `json:"file,omitempty"`
	// Diagnostic says why the file as last read was rejected, "" when it
	// is in force. While it is set, the last good config stays in force.
	Diagnostic string `json:"diagnostic,omitempty"`
	// DefaultAgent is the file's "default_agent": the agent of a session
	// created without one; "" when the file names none.
	DefaultAgent string `json:"default_agent,omitempty"`
	// PathEnv is the PATH searched for the providers' programs, said once
	// here rather than in the diagnostic of every provider not found in it.
	PathEnv string `json:"path_env,omitempty"`
	// Providers are sorted by id.
	Providers []ProviderStatus `json:"providers"`
}

// Provider returns the status of provider id and whether it exists.
func (s Snapshot) Provider(id string) (ProviderStatus, bool) {
	i, ok := slices.BinarySearchFunc(s.Providers, id, func(p ProviderStatus, id string) int {
		return strings.Compare(p.ID, id)
	})
	if !ok {
		return ProviderStatus{}, false
	}
	return s.Providers[i], true
}

// Lookup returns the status of provider id, or an error wrapping
// ErrUnknown that names the closest known id, if one is close, and all of
// them: `unknown provider "gemni", did you mean "gemini"? (known: ...)`.
func (s Snapshot) Lookup(id string) (ProviderStatus, error) {
	if p, ok := s.Provider(id); ok {
		return p, nil
	}
	ids := make([]string, len(s.Providers))
	for i, p := range s.Providers {
		ids[i] = p.ID
	}
	return ProviderStatus{}, errorOf(ErrUnknown, "unknown provider %q%s (known: %s)", id, didYouMean(id, ids), strings.Join(ids, ", "))
}

// ProviderStatus describes one provider. Its env is left out on purpose
// (PassEnv and AuthEnv are names, never values), and the values of its
// MCP servers' env and headers are redacted: they may hold secrets.
type ProviderStatus struct {
	ID          string        `json:"id"`
	Label       string        `json:"label"`
	Description string        `json:"description,omitempty"`
	Kind        backends.Kind `json:"kind"`
	Enabled     bool          `json:"enabled"`
	// Status is one of StatusReady, StatusDisabled, StatusNotInstalled,
	// StatusError, StatusProbing or StatusNeedsAuth.
	Status string `json:"status"`
	// Hosts, filled by the API from the hosts' heartbeats, are the hosts
	// sharing the store that can run the provider now (each host reads
	// its own providers.json); the registry leaves it nil.
	Hosts []string `json:"hosts,omitempty"`
	// Diagnostic explains a status other than ready.
	Diagnostic string `json:"diagnostic,omitempty"`
	// Path is the program found for Command[0], "" when none was.
	Path string `json:"path,omitempty"`
	// Command is the configured program and arguments.
	Command []string `json:"command"`
	// BuiltIn is true for the providers agentpool ships.
	BuiltIn bool `json:"built_in"`
	// Sandbox is the confinement policy the provider's Spec carries, its
	// paths expanded ("$WORKTREE" excepted). Whether the kernel can
	// apply it is the launcher's to say.
	Sandbox backends.SandboxSpec `json:"sandbox"`
	// MCPServers are the MCP servers the provider's agents get, with the
	// values of their env and headers replaced by backends.Redacted.
	MCPServers backends.MCPServers `json:"mcp_servers,omitempty"`
	// Budget is the provider's limit over all its sessions ("budget" in
	// providers.json), nil when it has none.
	Budget *backends.Budget `json:"budget,omitempty"`
	// Spares is how many spare sessions of the provider the daemon keeps
	// ready per repository ("spares" in providers.json, at most
	// MaxSpares), so that a new session finds its agent started.
	Spares int `json:"spares,omitempty"`
	// Probe is the last probe result, nil before the first probe.
	Probe *ProbeInfo `json:"probe,omitempty"`
	// SandboxNotes are the grants of Sandbox that every launch refuses
	// (the home, a secret, the daemon's home), each with why and what to
	// do instead.
	SandboxNotes []backends.SandboxNote `json:"sandbox_notes,omitempty"`
	// LastLaunch is what the sandbox said of the provider's last launch
	// when it refused a grant or denied the agent a path; nil otherwise.
	LastLaunch *LaunchReport `json:"last_launch,omitempty"`
	// PassEnv names the variables of the daemon's environment the
	// provider's agents get besides backends.BaseEnv ("pass_env", or the
	// built-in's list); AuthEnv those its agent's login methods name,
	// which they get too (see backends.Spec). Names only: values are
	// never shown.
	PassEnv []string `json:"pass_env,omitempty"`
	AuthEnv []string `json:"auth_env,omitempty"`
	// EnvNotes say what of the provider's environment its agents do not
	// get, and why: proxy variables in its "env", variables its agent's
	// login methods name that only the owner may pass.
	EnvNotes []string `json:"env_notes,omitempty"`
	// NetworkRefused are the last connections of its agents the egress
	// proxy refused (at most MaxNetworkRefused targets, the newest
	// first), each with the "sandbox.network" entry that would allow it;
	// cleared when its network setting changes.
	NetworkRefused []NetworkRefusal `json:"network_refused,omitempty"`
}

// Change reports what one new snapshot changed, by provider id, sorted.
// Enabled and Disabled list flips of the "enabled" flag; SpecChanged lists
// providers whose launch Spec (program, arguments, environment, timeouts,
// permissions, ...) differs, so warm agents run an outdated spec; Updated
// lists providers whose label, status, diagnostic or probe changed without
// any of the above.
type Change struct {
	Version     int64    `json:"version"`
	Added       []string `json:"added,omitempty"`
	Removed     []string `json:"removed,omitempty"`
	Enabled     []string `json:"enabled,omitempty"`
	Disabled    []string `json:"disabled,omitempty"`
	SpecChanged []string `json:"spec_changed,omitempty"`
	Updated     []string `json:"updated,omitempty"`
	// Diagnostic is the snapshot's Diagnostic.
	Diagnostic string `json:"diagnostic,omitempty"`
}

// LogValue implements slog.LogValuer: only the lists that are not empty.
func (c Change) LogValue() slog.Value {
	var attrs []slog.Attr
	for _, l := range []struct {
		key string
		ids []string
	}{{"added", c.Added}, {"removed", c.Removed}, {"enabled", c.Enabled}, {"disabled", c.Disabled},
		{"spec_changed", c.SpecChanged}, {"updated", c.Updated}} {
		if len(l.ids) > 0 {
			attrs = append(attrs, slog.String(l.key, strings.Join(l.ids, ",")))
		}
	}
	return slog.GroupValue(attrs...)
}

// Registry holds the providers that may be launched: the built-ins merged
// with the providers file, kept current by Run. All methods are safe for
// concurrent use.
type Registry struct {
	cfg     Config
	log     *slog.Logger
	baseDir string

	cur atomic.Pointer[state]

	mu      sync.Mutex
	loaded  bool
	read    readResult
	readErr error
	defs    map[string]*definition
	// settings are the document's own fields, from the file in force.
	settings settings
	// good is the content of the file that defs come from, nil while
	// they are the built-ins because no file was ever accepted.
	good     []byte
	lookups  map[string]lookup
	notes    map[string]sandboxNotes
	launches map[string]*LaunchReport
	refused  map[string]*refusedList
	diag     string
	probes   map[string]*probeRecord
	inflight map[string]*probeCall
	subs     map[*subscriber]struct{}
	version  int64
	closed   bool

	patchMu sync.Mutex
	running atomic.Bool
	// runStarted is closed once Run watches (and has installed its SIGHUP
	// handler); tests wait for it.
	runStarted chan struct{}

	sem    chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// readResult is one read of the providers file.
type readResult struct {
	exists bool
	data   []byte
	err    string
	// untrusted is set when err is Config.Trust's refusal.
	untrusted bool
}

func (a readResult) same(b readResult) bool {
	return a.exists == b.exists && a.err == b.err && a.untrusted == b.untrusted && string(a.data) == string(b.data)
}

// etag is a strong HTTP entity tag of the bytes read: a quoted hash, or
// "absent" when there is no file.
func (a readResult) etag() string {
	switch {
	case a.err != "":
		return ""
	case !a.exists:
		return `"absent"`
	}
	return ETagOf(a.data)
}

// ETagOf is the ETag (Snapshot.ETag) of a providers file holding data: a
// client that wrote the file knows its change is in force once the
// snapshot shows it.
func ETagOf(data []byte) string {
	sum := sha256.Sum256(data)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// New returns a registry with the file loaded once. A bad or unreadable
// file is not an error: the registry starts with the built-ins and shows
// the diagnostic in its Snapshot. Call Run to follow changes of the file
// and Close to release it.
func New(cfg Config) (*Registry, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		cfg:        cfg,
		log:        cfg.Logger,
		lookups:    make(map[string]lookup),
		notes:      make(map[string]sandboxNotes),
		launches:   make(map[string]*LaunchReport),
		refused:    make(map[string]*refusedList),
		probes:     make(map[string]*probeRecord),
		inflight:   make(map[string]*probeCall),
		subs:       make(map[*subscriber]struct{}),
		runStarted: make(chan struct{}),
		sem:        make(chan struct{}, cfg.ProbeConcurrency),
		ctx:        ctx,
		cancel:     cancel,
	}
	if cfg.Path != "" {
		r.baseDir = filepath.Dir(cfg.Path)
		r.log = r.log.With(logFile, cfg.Path)
	}
	r.cur.Store(&state{byID: map[string]*providerState{}})
	if err := r.load(true); err != nil {
		r.log.Warn("providers file rejected; using the built-ins", logError, err)
	}
	return r, nil
}

// Snapshot returns the current snapshot. It is cheap: no copy is made.
func (r *Registry) Snapshot() Snapshot {
	return r.cur.Load().snap
}

// Reload reads the file now and looks every command up in PATH again, as
// SIGHUP does. It returns the file's diagnostic when the file is rejected
// (one or more *ValidationError, or the read error); the last good config
// then stays in force.
func (r *Registry) Reload() error {
	return r.load(true)
}

// load reads the file and applies it. Unless force is set, a read that
// returns what the previous one did changes nothing.
func (r *Registry) load(force bool) error {
	rd := r.readFile()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	return r.applyLocked(rd, force)
}

// readFile reads the providers file, if Config.Trust accepts it.
func (r *Registry) readFile() readResult {
	if r.cfg.Path == "" {
		return readResult{}
	}
	if rd, ok := r.vet(r.cfg.Path); !ok {
		return rd
	}
	return readPath(r.cfg.Path)
}

// vet runs Config.Trust on path. When it refuses the file, vet returns
// the read result that says so and false.
func (r *Registry) vet(path string) (readResult, bool) {
	if r.cfg.Trust == nil {
		return readResult{}, true
	}
	err := r.cfg.Trust(path)
	if err == nil || missing(err) {
		return readResult{}, true
	}
	return readResult{exists: true, err: err.Error(), untrusted: true}, false
}

// applyLocked makes rd the file in force if it is valid, and commits.
func (r *Registry) applyLocked(rd readResult, force bool) error {
	if r.loaded && !force && rd.same(r.read) {
		return r.readErr
	}
	r.loaded, r.read, r.readErr = true, rd, nil
	switch {
	case rd.untrusted:
		r.readErr = errorOf(ErrConfig, "%s", rd.err)
	case rd.err != "":
		r.readErr = fmt.Errorf("read %s: %s", r.cfg.Path, rd.err)
	case !rd.exists && r.good != nil:
		// The file in force went away (deleted by mistake, or a tool that
		// is half-way through replacing it): falling back to the built-ins
		// would silently undo the user's choices, such as a disabled agent.
		r.readErr = fmt.Errorf("%s is missing: the last good config stays in force until it is back "+
			"(write {\"version\": %d, \"providers\": {}} there for the built-ins)", r.cfg.Path, FileVersion)
	case !rd.exists:
		r.settings = settings{}
		r.defs = make(map[string]*definition)
		for _, d := range builtins(r.cfg.SelfPath) {
			r.defs[d.id] = d
		}
	default:
		defs, set, err := parseSettings(r.cfg.Path, rd.data, builtins(r.cfg.SelfPath))
		if err != nil {
			r.readErr = err
		} else {
			r.defs, r.good, r.settings = defs, rd.data, set
		}
	}
	if r.defs == nil { // a bad file at start: built-ins only
		r.defs = make(map[string]*definition)
		for _, d := range builtins(r.cfg.SelfPath) {
			r.defs[d.id] = d
		}
	}
	r.diag = ""
	if r.readErr != nil {
		r.diag = r.readErr.Error()
	}
	r.lookupAllLocked()
	r.commitLocked()
	return r.readErr
}

// lookupAllLocked looks up the program of every provider.
func (r *Registry) lookupAllLocked() {
	clear(r.lookups)
	seen := make(map[string]lookup)
	for id, d := range r.defs {
		l, ok := seen[d.command[0]]
		if !ok {
			l = lookPath(d.command[0], r.cfg.PathEnv, r.baseDir, r.cfg.Home)
			seen[d.command[0]] = l
		}
		r.lookups[id] = l
	}
}

// Resolve returns the launch Spec of provider id, with Dir left empty. Its
// errors wrap ErrUnknown, ErrDisabled (naming the config file),
// ErrNotInstalled (with the PATH searched) or ErrConfig. A provider that
// was not installed is looked up again first, so installing it is enough.
func (r *Registry) Resolve(id string) (backends.Spec, error) {
	st := r.cur.Load()
	p := st.byID[id]
	if p == nil {
		return backends.Spec{}, r.unknown(st, id)
	}
	if p.status.Status == StatusNotInstalled {
		st = r.lookupAgain(id)
		if p = st.byID[id]; p == nil {
			return backends.Spec{}, r.unknown(st, id)
		}
	}
	if p.err != nil {
		return backends.Spec{}, p.err
	}
	spec := cloneSpec(p.spec)
	spec.AuthEnv = slices.Clone(p.authEnv)
	return spec, nil
}

// lookupAgain looks the program of id up again and commits the result.
func (r *Registry) lookupAgain(id string) *state {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := r.defs[id]; d != nil && !r.closed {
		r.lookups[id] = lookPath(d.command[0], r.cfg.PathEnv, r.baseDir, r.cfg.Home)
		r.commitLocked()
	}
	return r.cur.Load()
}

// unknown is the ErrUnknown error of id: the closest known id, if one is
// close, and all of them.
func (r *Registry) unknown(st *state, id string) error {
	_, err := st.snap.Lookup(id)
	if st.snap.Diagnostic != "" {
		return fmt.Errorf("%w; %s has errors, so what it defines is not in force: %w", err, st.snap.File, ErrConfig)
	}
	return err
}

// Subscribe returns the current snapshot and a channel that receives every
// later Change, taken under one lock so that nothing is missed between the
// two. A subscriber that falls more than a few changes behind is dropped:
// its channel is closed, and it should subscribe again. The returned
// function ends the subscription; it may be called more than once.
func (r *Registry) Subscribe() (Snapshot, <-chan Change, func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &subscriber{ch: make(chan Change, subscriberBuffer)}
	if r.closed {
		close(s.ch)
		return r.cur.Load().snap, s.ch, func() {}
	}
	r.subs[s] = struct{}{}
	cancel := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.subs[s]; ok {
			delete(r.subs, s)
			close(s.ch)
		}
	}
	return r.cur.Load().snap, s.ch, cancel
}

type subscriber struct {
	ch chan Change
}

// publishLocked hands c to every subscriber, dropping those that are full.
func (r *Registry) publishLocked(c Change) {
	for s := range r.subs {
		select {
		case s.ch <- c:
		default:
			delete(r.subs, s)
			close(s.ch)
			r.log.Warn("provider change subscriber dropped: it fell behind", logVersion, c.Version)
		}
	}
}

// Close stops the probes in flight, waits for them, and closes every
// subscription. Run returns soon after. Close is idempotent.
func (r *Registry) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		for s := range r.subs {
			delete(r.subs, s)
			close(s.ch)
		}
	}
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	return nil
}
