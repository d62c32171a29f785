package acp

import (
	"context"
	"errors"
	"fmt"
	"os"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/backends"
)

// codeAuthRequired is ACP's error code for "Authentication required".
const codeAuthRequired = -32000

// isAuthRequired reports whether err is an agent's "Authentication
// required" answer.
func isAuthRequired(err error) bool {
	var re *acpsdk.RequestError
	return errors.As(err, &re) && re.Code == codeAuthRequired
}

// authMethods describes the login methods an agent offers.
func authMethods(ms []acpsdk.AuthMethod) []backends.AuthMethod {
	var out []backends.AuthMethod
	for _, m := range ms {
		switch {
		case m.EnvVar != nil:
			am := backends.AuthMethod{ID: m.EnvVar.Id, Name: m.EnvVar.Name, Type: backends.AuthEnvVar, Description: deref(m.EnvVar.Description), Link: deref(m.EnvVar.Link)}
			for _, v := range m.EnvVar.Vars {
				am.Vars = append(am.Vars, v.Name)
			}
			out = append(out, am)
		case m.Terminal != nil:
			am := backends.AuthMethod{ID: m.Terminal.Id, Name: m.Terminal.Name, Type: backends.AuthTerminal, Description: deref(m.Terminal.Description), Args: m.Terminal.Args}
			for k, v := range m.Terminal.Env {
				if s, ok := v.(string); ok {
					if am.Env == nil {
						am.Env = map[string]string{}
					}
					am.Env[k] = s
				}
			}
			out = append(out, am)
		case m.Agent != nil:
			out = append(out, backends.AuthMethod{ID: m.Agent.Id, Name: m.Agent.Name, Type: backends.AuthAgent, Description: deref(m.Agent.Description)})
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Authenticate asks the agent to log in with one of its "agent" methods
// (ACP authenticate). The agent does it its own way (it may open a
// browser, or print a link on its stderr); ctx bounds the wait. An id the
// agent does not offer, or one of another type, is refused before the
// agent is asked.
func (b *Backend) Authenticate(ctx context.Context, methodID string) error {
	b.mu.Lock()
	var m *backends.AuthMethod
	for i := range b.info.Auth {
		if b.info.Auth[i].ID == methodID {
			m = &b.info.Auth[i]
		}
	}
	b.mu.Unlock()
	switch {
	case m == nil:
		return fmt.Errorf("authenticate: the agent offers no login method %q", methodID)
	case m.Type != backends.AuthAgent:
		return fmt.Errorf("authenticate: login method %q is of type %s, which the user carries out, not the agent", methodID, m.Type)
	}
	conn, release, err := b.acquire()
	if err != nil {
		return fmt.Errorf("authenticate: %w", err)
	}
	defer release()
	if _, err := conn.Authenticate(ctx, acpsdk.AuthenticateRequest{MethodId: methodID}); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("authenticate: %w", context.Cause(ctx))
		}
		return fmt.Errorf("authenticate: %s", refusal(err))
	}
	return nil
}

// Login starts spec's agent as Probe does, without a session, and asks it
// to log in with methodID (see Backend.Authenticate); ctx bounds the
// whole call. The agent keeps its credentials where it keeps them: the
// daemon never sees them.
func (p Prober) Login(ctx context.Context, spec backends.Spec, methodID string) error {
	if spec.Dir == "" {
		dir, err := os.MkdirTemp("", "agentpool-login-*")
		if err != nil {
			return fmt.Errorf("log in to %q: %w", spec.Provider, err)
		}
		defer os.RemoveAll(dir)
		spec.Dir = dir
	}
	var pj ProbeJail
	if p.Jail != nil {
		var err error
		if pj, err = p.Jail(spec); err != nil {
			return fmt.Errorf("log in to %q: confine: %w", spec.Provider, err)
		}
		if pj.Release != nil {
			defer pj.Release()
		}
	}
	b, err := New(Config{Spec: spec, Logger: p.Logger, StopGrace: probeStopGrace, KillGrace: probeStopGrace, Jail: pj.Jail, NoSession: true})
	if err != nil {
		return fmt.Errorf("log in to %q: %w", spec.Provider, err)
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
		return fmt.Errorf("log in to %q: %w", spec.Provider, err)
	}
	if err := b.Authenticate(ctx, methodID); err != nil {
		if tail := b.proc.Tail(); tail != "" {
			return fmt.Errorf("log in to %q: %w; last stderr:\n%s", spec.Provider, err, tail)
		}
		return fmt.Errorf("log in to %q: %w", spec.Provider, err)
	}
	return nil
}
