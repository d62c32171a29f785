package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// ProbeInfo is what a tier-2 probe learnt of an agent: what it says it is
// and offers right after session/new.
type ProbeInfo struct {
	AgentName       string   `json:"agent_name,omitempty"`
	AgentVersion    string   `json:"agent_version,omitempty"`
	ProtocolVersion int      `json:"protocol_version,omitempty"`
	AuthMethods     []string `json:"auth_methods,omitempty"`
	// Auth describes the ways the agent offers to log in.
	Auth []backends.AuthMethod `json:"auth,omitempty"`
	// NeedsAuth is set when the probe failed because the agent needs the
	// user to log in (agentpool login).
	NeedsAuth bool `json:"needs_auth,omitempty"`
	// AuthMessage is what the agent said when it refused to work until
	// the user logs in, beyond ACP's "Authentication required": with no
	// login method (Auth empty), the only instruction there is.
	AuthMessage string `json:"auth_message,omitempty"`
	// LoginCommand is the command AuthMessage names for logging in
	// ("auggie login"), to run in the user's terminal; shown, never run.
	LoginCommand  string          `json:"login_command,omitempty"`
	LoadSession   bool            `json:"load_session"`
	Modes         []backends.Mode `json:"modes,omitempty"`
	CurrentMode   string          `json:"current_mode,omitempty"`
	ConfigOptions json.RawMessage `json:"config_options,omitempty"`
	Models        json.RawMessage `json:"models,omitempty"`
	Commands      json.RawMessage `json:"commands,omitempty"`
	// ProbedAt is when the probe ended; Duration how long it took.
	ProbedAt time.Time     `json:"probed_at"`
	Duration time.Duration `json:"duration"`
	// Error says why the probe failed, "" when it succeeded.
	Error string `json:"error,omitempty"`
}

// probeRecord is the cached result of the last probe of a provider and the
// spec it was taken of; a different spec makes it stale.
type probeRecord struct {
	info *ProbeInfo
	spec backends.Spec
}

// probeCall is a probe in flight; callers wait on done.
type probeCall struct {
	done  chan struct{}
	begun time.Time
	info  ProbeInfo
	err   error
}

// Probe runs a tier-2 probe of provider id now (or joins the one in
// flight) and returns its result, which is also cached and shown in the
// snapshot. A probe in flight that began before the call is not its
// answer: Probe waits for it and probes again (callers arriving together
// share one probe). The probe belongs to the registry, not to ctx: if ctx ends
// first, Probe returns ctx's error and the probe goes on, bounded by
// Config.ProbeTimeout. Errors: those of Resolve, ErrNoProber,
// backends.ErrUnsupported for a PTY provider, ErrClosed, or the probe's own
// failure.
func (r *Registry) Probe(ctx context.Context, id string) (ProbeInfo, error) {
	spec, err := r.Resolve(id)
	if err != nil {
		return ProbeInfo{}, fmt.Errorf("probe: %w", err)
	}
	if spec.Kind != backends.KindACP {
		return ProbeInfo{}, fmt.Errorf("probe %q: only ACP agents can be probed: %w", id, backends.ErrUnsupported)
	}
	if r.cfg.Prober == nil {
		return ProbeInfo{}, fmt.Errorf("probe %q: %w", id, ErrNoProber)
	}
	// The answer must be taken after the call: a probe in flight that
	// began before it (say, before the agent was logged in) is waited
	// for, and another one started.
	asked := r.cfg.Now()
	for {
		r.mu.Lock()
		call := r.inflight[id]
		if call == nil || !call.begun.Before(asked) {
			call, err = r.startProbeLocked(id, spec)
		}
		r.mu.Unlock()
		if err != nil {
			return ProbeInfo{}, err
		}
		select {
		case <-call.done:
			if call.begun.Before(asked) {
				continue
			}
			return call.info, call.err
		case <-ctx.Done():
			return ProbeInfo{}, fmt.Errorf("probe %q: %w", id, context.Cause(ctx))
		}
	}
}

// startProbeLocked starts a probe of spec in a goroutine the registry owns,
// or returns the one in flight for id.
func (r *Registry) startProbeLocked(id string, spec backends.Spec) (*probeCall, error) {
	if r.closed {
		return nil, fmt.Errorf("probe %q: %w", id, ErrClosed)
	}
	if call := r.inflight[id]; call != nil {
		return call, nil
	}
	call := &probeCall{done: make(chan struct{}), begun: r.cfg.Now()}
	r.inflight[id] = call
	r.commitLocked()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		info, err := r.runProbe(id, spec)
		if more := missingAuthEnv(info, spec); errors.Is(err, backends.ErrAuthRequired) && len(more) > 0 {
			// The agent reads its credentials from variables the daemon
			// has but this probe did not pass (they were not known
			// before): once more with them, as its next launch will be.
			spec.AuthEnv = append(slices.Clone(spec.AuthEnv), more...)
			info, err = r.runProbe(id, spec)
		}
		r.mu.Lock()
		delete(r.inflight, id)
		if !errors.Is(err, ErrClosed) {
			r.probes[id] = &probeRecord{info: &info, spec: spec}
		}
		if !r.closed {
			r.commitLocked()
		}
		r.mu.Unlock()
		call.info, call.err = info, err
		close(call.done)
	}()
	return call, nil
}

// runProbe waits for a probe slot, then probes spec in a temporary
// directory removed afterwards, within Config.ProbeTimeout.
func (r *Registry) runProbe(id string, spec backends.Spec) (ProbeInfo, error) {
	select {
	case r.sem <- struct{}{}:
		defer func() { <-r.sem }()
	case <-r.ctx.Done():
		return ProbeInfo{}, fmt.Errorf("probe %q: %w", id, ErrClosed)
	}
	log := r.log.With(logProvider, id)
	start := r.cfg.Now()
	info, err := r.probeIn(id, spec)
	pi := ProbeInfo{
		AgentName: info.AgentName, AgentVersion: info.AgentVersion, ProtocolVersion: info.ProtocolVersion,
		AuthMethods: info.AuthMethods, Auth: info.Auth, LoadSession: info.LoadSession, Modes: info.Modes,
		CurrentMode: info.CurrentMode, ConfigOptions: info.ConfigOptions, Models: info.Models,
		Commands: info.Commands,
	}
	pi.ProbedAt = r.cfg.Now()
	pi.Duration = pi.ProbedAt.Sub(start)
	switch {
	case err != nil && r.ctx.Err() != nil:
		return pi, fmt.Errorf("probe %q: %w", id, ErrClosed)
	case errors.Is(err, backends.ErrAuthRequired):
		pi.Error, pi.NeedsAuth = err.Error(), true
		var ae *backends.AuthRequiredError
		if errors.As(err, &ae) {
			pi.AuthMessage = ae.Said()
			pi.LoginCommand = backends.LoginCommand(pi.AuthMessage)
		}
		log.Info("probe: the agent needs a login", logDuration, pi.Duration)
	case err != nil:
		pi.Error = err.Error()
		log.Warn("probe failed", logError, err, logDuration, pi.Duration)
	default:
		log.Info("probed", "agent", info.AgentName, "agent_version", info.AgentVersion, logDuration, pi.Duration)
	}
	return pi, err
}

// probeIn calls the prober with spec.Dir set to a fresh temporary
// directory.
func (r *Registry) probeIn(id string, spec backends.Spec) (backends.Info, error) {
	if r.cfg.ProbeDir != "" {
		if err := os.MkdirAll(r.cfg.ProbeDir, 0o700); err != nil {
			return backends.Info{}, fmt.Errorf("probe %q: %w", id, err)
		}
	}
	dir, err := os.MkdirTemp(r.cfg.ProbeDir, "agentpool-probe-")
	if err != nil {
		return backends.Info{}, fmt.Errorf("probe %q: %w", id, err)
	}
	defer os.RemoveAll(dir)
	spec.Dir = dir
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.ProbeTimeout)
	defer cancel()
	info, err := r.cfg.Prober.Probe(ctx, spec)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return info, fmt.Errorf("probe %q: no answer within %v: %w", id, r.cfg.ProbeTimeout, err)
		}
		return info, fmt.Errorf("probe %q: %w", id, err)
	}
	return info, nil
}

// probeStale starts a probe of every enabled, installed ACP provider whose
// last probe is missing or older than Config.ProbeTTL. It does nothing
// without a Prober or with a negative TTL.
func (r *Registry) probeStale() {
	if r.cfg.Prober == nil || r.cfg.ProbeTTL < 0 {
		return
	}
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.cur.Load().byID {
		if p.err != nil || p.spec.Kind != backends.KindACP || r.inflight[p.status.ID] != nil {
			continue
		}
		if rec := r.probes[p.status.ID]; rec != nil && now.Sub(rec.info.ProbedAt) < r.cfg.ProbeTTL {
			continue
		}
		if _, err := r.startProbeLocked(p.status.ID, p.spec); err != nil {
			return
		}
	}
}

// AuthRequired tells the registry that an agent of provider id refused to
// work until the user logs in: it probes the provider again (in the
// background), so that its status says so (StatusNeedsAuth) and lists the
// ways to log in. It does nothing for a provider it cannot probe.
func (r *Registry) AuthRequired(id string) {
	spec, err := r.Resolve(id)
	if err != nil || spec.Kind != backends.KindACP || r.cfg.Prober == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.startProbeLocked(id, spec); err != nil {
		r.log.Debug("probe after a login refusal", logProvider, id, logError, err)
	}
}

// LastProbeOK returns when the last probe of provider id ended, if it
// succeeded; the zero time when there was none or it failed. The pool
// forgets an agent's crashes before it (pool.ProbeReporter).
func (r *Registry) LastProbeOK(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.probes[id]; rec != nil && rec.info.Error == "" {
		return rec.info.ProbedAt
	}
	return time.Time{}
}
