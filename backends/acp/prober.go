package acp

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Prober runs the registry's tier-2 probe: spawn the agent in a temporary
// directory, initialize, session/new, collect what it says, stop it.
type Prober struct {
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// Jail, if set, confines each probe as an agent launch of the same
	// provider would be: it is called with the spec to probe, whose Dir is
	// the probe's private empty directory, and returns the probe's
	// confinement. An error fails the probe (its agent never runs
	// unconfined because its jail could not be made). Nil probes
	// unconfined.
	Jail func(spec backends.Spec) (ProbeJail, error)
}

// ProbeJail is the confinement of one probe.
type ProbeJail struct {
	// Jail is where the agent starts; nil starts it unconfined. The
	// backend kills and releases it when the agent ends.
	Jail backends.Jail
	// Explain, if set, returns the error of a failed start with what the
	// sandbox denied the agent, if anything; err itself otherwise.
	Explain func(err error) error
	// Release, if set, is called once the probe's agent has been stopped
	// (or could not be started): it frees what the jail still holds.
	Release func()
}

// probeStopGrace bounds each rung of a probe's stop ladder; probeStopWait
// bounds the whole stop.
const (
	probeStopGrace = 500 * time.Millisecond
	probeStopWait  = 5 * time.Second
)

// Probe starts spec's agent in spec.Dir (the caller's empty directory) or,
// when it is "", in a fresh temporary directory that it removes after; in
// its jail when Prober.Jail makes one; and returns what the handshake
// told. ctx bounds the whole probe; the agent (and everything in its
// jail) is always stopped.
func (p Prober) Probe(ctx context.Context, spec backends.Spec) (backends.Info, error) {
	var err error
	if spec.Dir == "" {
		dir, err := os.MkdirTemp("", "agentpool-probe-*")
		if err != nil {
			return backends.Info{}, fmt.Errorf("probe %q: %w", spec.Provider, err)
		}
		defer os.RemoveAll(dir)
		spec.Dir = dir
	}
	// A probe asks what the agent offers: the provider's MCP servers
	// would only be started for nothing.
	spec.MCPServers = nil
	var pj ProbeJail
	if p.Jail != nil {
		if pj, err = p.Jail(spec); err != nil {
			return backends.Info{}, fmt.Errorf("probe %q: confine: %w", spec.Provider, err)
		}
		if pj.Release != nil {
			defer pj.Release()
		}
	}
	b, err := New(Config{Spec: spec, Logger: p.Logger, StopGrace: probeStopGrace, KillGrace: probeStopGrace, Jail: pj.Jail})
	if err != nil {
		return backends.Info{}, fmt.Errorf("probe %q: %w", spec.Provider, err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeStopWait)
		defer cancel()
		_ = b.Stop(stopCtx)
	}()
	_, err = b.Start(ctx, "")
	if err != nil {
		if pj.Explain != nil {
			err = pj.Explain(err)
		}
		// What the agent said of itself before it failed (its login
		// methods, when it needs a login) is the caller's too.
		return b.Info(), fmt.Errorf("probe: %w", err)
	}
	// Updates sent right after session/new (commands, modes) are part of
	// what a probe should report: give them a moment to arrive.
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
	}
	return b.Info(), nil
}
