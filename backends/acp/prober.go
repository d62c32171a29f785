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
}

// Probe starts spec's agent in a fresh temporary directory and returns what
// the handshake told. ctx bounds the whole probe; the agent is always
// stopped and the directory removed.
func (p Prober) Probe(ctx context.Context, spec backends.Spec) (backends.Info, error) {
	dir, err := os.MkdirTemp("", "agentpool-probe-*")
	if err != nil {
		return backends.Info{}, fmt.Errorf("probe %q: %w", spec.Provider, err)
	}
	defer os.RemoveAll(dir)
	spec.Dir = dir
	b, err := New(Config{Spec: spec, Logger: p.Logger, StopGrace: 500 * time.Millisecond, KillGrace: 500 * time.Millisecond})
	if err != nil {
		return backends.Info{}, fmt.Errorf("probe %q: %w", spec.Provider, err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = b.Stop(stopCtx)
	}()
	_, err = b.Start(ctx, "")
	if err != nil {
		return backends.Info{}, fmt.Errorf("probe: %w", err)
	}
	// Updates sent right after session/new (commands, modes) are part of
	// what a probe should report: give them a moment to arrive.
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
	}
	return b.Info(), nil
}
