package acp

import (
	"context"
	"fmt"
	"os"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/backends"
)

// MaxListedSessions bounds what ListSessions gathers over the agent's
// pages: an agent cannot make the daemon hold an unbounded list.
const MaxListedSessions = 1000

// maxListPages bounds the pages ListSessions asks for, whatever cursors an
// agent returns.
const maxListPages = 50

// ListSessions asks the agent for its own sessions (ACP session/list),
// those whose working directory is cwd when it is not "", following its
// pages up to MaxListedSessions. It returns an error wrapping
// backends.ErrUnsupported when the agent does not offer session/list.
func (b *Backend) ListSessions(ctx context.Context, cwd string) ([]backends.AgentSession, error) {
	b.mu.Lock()
	can := b.info.Sessions.List
	b.mu.Unlock()
	if !can {
		return nil, fmt.Errorf("session/list: %w", backends.ErrUnsupported)
	}
	conn, release, err := b.acquire()
	if err != nil {
		return nil, fmt.Errorf("session/list: %w", err)
	}
	defer release()
	req := acpsdk.ListSessionsRequest{}
	if cwd != "" {
		req.Cwd = &cwd
	}
	out := []backends.AgentSession{}
	for range maxListPages {
		resp, err := conn.ListSessions(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("session/list: %w", err)
		}
		for _, s := range resp.Sessions {
			if len(out) == MaxListedSessions {
				return out, nil
			}
			as := backends.AgentSession{ID: string(s.SessionId), Cwd: s.Cwd}
			if s.Title != nil {
				as.Title = *s.Title
			}
			if s.UpdatedAt != nil {
				as.UpdatedAt = *s.UpdatedAt
			}
			out = append(out, as)
		}
		if resp.NextCursor == nil || *resp.NextCursor == "" {
			break
		}
		req.Cursor = resp.NextCursor
	}
	return out, nil
}

// ListSessions starts spec's agent as Probe does (confined by Prober.Jail,
// in spec.Dir or a temporary directory), without making a session, and
// returns its sessions of cwd (see Backend.ListSessions). ctx bounds the
// whole call; the agent is always stopped.
func (p Prober) ListSessions(ctx context.Context, spec backends.Spec, cwd string) ([]backends.AgentSession, error) {
	if spec.Dir == "" {
		dir, err := os.MkdirTemp("", "agentpool-list-*")
		if err != nil {
			return nil, fmt.Errorf("list sessions of %q: %w", spec.Provider, err)
		}
		defer os.RemoveAll(dir)
		spec.Dir = dir
	}
	var pj ProbeJail
	if p.Jail != nil {
		var err error
		if pj, err = p.Jail(spec); err != nil {
			return nil, fmt.Errorf("list sessions of %q: confine: %w", spec.Provider, err)
		}
		if pj.Release != nil {
			defer pj.Release()
		}
	}
	b, err := New(Config{Spec: spec, Logger: p.Logger, StopGrace: probeStopGrace, KillGrace: probeStopGrace, Jail: pj.Jail, NoSession: true})
	if err != nil {
		return nil, fmt.Errorf("list sessions of %q: %w", spec.Provider, err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeStopWait)
		defer cancel()
		_ = b.Stop(stopCtx)
	}()
	if _, err := b.Start(ctx, ""); err != nil {
		if pj.Explain != nil {
			err = pj.Explain(err)
		}
		return nil, fmt.Errorf("list sessions of %q: %w", spec.Provider, err)
	}
	list, err := b.ListSessions(ctx, cwd)
	if err != nil {
		return nil, fmt.Errorf("list sessions of %q: %w", spec.Provider, err)
	}
	return list, nil
}
