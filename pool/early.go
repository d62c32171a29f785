package pool

import "github.com/agentpool/agentpool/backends"

// A new session without a spare makes its worktree before its agent can
// start in it, and a confined agent's start begins with work that needs
// no worktree: its launcher's process in a cgroup of its own, its
// namespaces, its runtime's start. When the Launcher is an EarlyLauncher,
// create starts that work while the worktree is made, and the session's
// first start of that agent (its warm-up, or a prompt that came first)
// takes it in its LaunchRequest. What no start took is ended once the
// warm-up has decided (warmUp), or when the create fails.

// launchEarly starts, on a goroutine, what the launcher can start of
// agent's launch for session before its worktree exists; the returned
// function waits for it (nil when nothing was started). It must be
// called.
func (p *Pool) launchEarly(spec backends.Spec, session string) (wait func() Early) {
	el, ok := p.cfg.Launcher.(EarlyLauncher)
	if !ok {
		return func() Early { return nil }
	}
	ch := make(chan Early, 1)
	go func() {
		e, ok := el.LaunchEarly(spec, session)
		if !ok {
			e = nil
		}
		ch <- e
	}()
	return func() Early { return <-ch }
}

// keepEarly keeps e for the first start of (session, agent).
func (p *Pool) keepEarly(session, agent string, e Early) {
	if e == nil {
		return
	}
	p.mu.Lock()
	old := p.earlies[key{session, agent}]
	p.earlies[key{session, agent}] = e
	p.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// takeEarlyLocked returns (and forgets) what was started early for k.
func (p *Pool) takeEarlyLocked(k key) Early {
	e := p.earlies[k]
	delete(p.earlies, k)
	return e
}
