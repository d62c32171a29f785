package wiring

import (
	"context"
	"fmt"
	"os"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
)

// maxListings bounds the agents started at once to list their sessions:
// each request starts one.
const maxListings = 2

// AgentSessions runs a provider's agent outside any session of ours, as a
// probe is (confined, in a private empty directory), to list its own
// sessions of a repository or to have it log in, and stops it.
type AgentSessions struct {
	resolve func(id string) (backends.Spec, error)
	prober  acp.Prober
	dir     string
	slots   chan struct{}
}

// NewAgentSessions returns an AgentSessions that resolves providers with
// resolve, starts their agents with prober, in directories it makes under
// dir.
func NewAgentSessions(resolve func(id string) (backends.Spec, error), prober acp.Prober, dir string) *AgentSessions {
	return &AgentSessions{resolve: resolve, prober: prober, dir: dir, slots: make(chan struct{}, maxListings)}
}

// List returns provider's sessions whose working directory is repo (all of
// them when repo is ""). It waits for one of maxListings slots, within
// ctx.
func (a *AgentSessions) List(ctx context.Context, provider, repo string) ([]backends.AgentSession, error) {
	var out []backends.AgentSession
	err := a.run(ctx, provider, "list sessions of", func(spec backends.Spec) error {
		var err error
		out, err = a.prober.ListSessions(ctx, spec, repo)
		return err
	})
	return out, err
}

// Login has provider's agent log in with its login method methodID (of
// type "agent"): the agent keeps the credentials where it keeps them.
func (a *AgentSessions) Login(ctx context.Context, provider, methodID string) error {
	return a.run(ctx, provider, "log in to", func(spec backends.Spec) error {
		return a.prober.Login(ctx, spec, methodID)
	})
}

// run resolves provider and calls fn with its spec in a fresh private
// directory, once one of maxListings slots is free (within ctx).
func (a *AgentSessions) run(ctx context.Context, provider, what string, fn func(backends.Spec) error) error {
	spec, err := a.resolve(provider)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, provider, err)
	}
	if spec.Kind != backends.KindACP {
		return fmt.Errorf("%s %q: only ACP agents can: %w", what, provider, backends.ErrUnsupported)
	}
	select {
	case a.slots <- struct{}{}:
		defer func() { <-a.slots }()
	case <-ctx.Done():
		return fmt.Errorf("%s %q: %w", what, provider, context.Cause(ctx))
	}
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return fmt.Errorf("%s %q: %w", what, provider, err)
	}
	dir, err := os.MkdirTemp(a.dir, ".agent-"+provider+"-*")
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, provider, err)
	}
	defer os.RemoveAll(dir)
	spec.Dir = dir
	return fn(spec)
}
