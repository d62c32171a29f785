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

// AgentSessions lists a provider's own sessions: its agent is started as a
// probe is (confined, in a private empty directory), asked for its
// sessions of a repository, and stopped.
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
	spec, err := a.resolve(provider)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	if spec.Kind != backends.KindACP {
		return nil, fmt.Errorf("list sessions of %q: only ACP agents list their sessions: %w", provider, backends.ErrUnsupported)
	}
	select {
	case a.slots <- struct{}{}:
		defer func() { <-a.slots }()
	case <-ctx.Done():
		return nil, fmt.Errorf("list sessions of %q: %w", provider, context.Cause(ctx))
	}
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return nil, fmt.Errorf("list sessions of %q: %w", provider, err)
	}
	dir, err := os.MkdirTemp(a.dir, ".list-"+provider+"-*")
	if err != nil {
		return nil, fmt.Errorf("list sessions of %q: %w", provider, err)
	}
	defer os.RemoveAll(dir)
	spec.Dir = dir
	return a.prober.ListSessions(ctx, spec, repo)
}
