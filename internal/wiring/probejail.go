package wiring

import (
	"errors"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/egress"
)

// probeJailPrefix names a probe's jail: its cgroup (and private TMPDIR)
// is ".probe-<provider>" at the top of the daemon's tree. Session ids may
// not start with ".", and the sandbox's directory names never turn another
// character into one, so no session's cgroup is named so. The name is
// flat so that two providers' probes, made and removed concurrently,
// share no parent cgroup that one could remove as the other is made.
const probeJailPrefix = ".probe-"

// ProbeJail confines a provider's probe as a launch of that provider is
// confined: a cgroup of its own (the subreaper fallback where none can be
// made) killed when the probe ends, and, when the provider's sandbox is
// enabled, the Landlock policy its agents get, with the probe's empty
// directory standing in for the worktree and no repository. A provider
// whose owner disabled its sandbox is probed without Landlock, as its
// agents run. Without a Sandbox, probes run unconfined.
func (c Confiner) ProbeJail(spec backends.Spec) (acp.ProbeJail, error) {
	if c.Sandbox == nil {
		return acp.ProbeJail{}, nil
	}
	if spec.Dir == "" {
		return acp.ProbeJail{}, errors.New("probe jail: no directory to stand in for the worktree")
	}
	var res *sandbox.PolicyResult
	var pol *sandbox.Policy
	if spec.Sandbox.Enabled {
		in := c.policyInput(spec)
		in.Worktree = spec.Dir
		r := sandbox.PolicyFor(in)
		if err := makeStateDirs(spec.Sandbox, r.Policy, c.Home); err != nil {
			return acp.ProbeJail{}, err
		}
		res, pol = &r, &r.Policy
	}
	name := probeJailPrefix + spec.Provider
	cfg := sandbox.JailConfig{Path: []string{name}, Policy: pol, Session: name, TmpRoot: c.TmpRoot}
	if c.viewed(pol) {
		// A probe reaches out as the provider's agents do; its refusals
		// have no session to go to.
		ev, closeEgress, err := c.Egress.open(spec.Sandbox, egress.Meta{Session: name, Provider: spec.Provider}, nil)
		if err != nil {
			return acp.ProbeJail{}, err
		}
		cfg.Egress, cfg.Released = ev, closeEgress
	}
	j, err := c.Sandbox.NewJail(cfg)
	if err != nil {
		if cfg.Released != nil {
			cfg.Released()
		}
		return acp.ProbeJail{}, err
	}
	pj := acp.ProbeJail{Jail: j, Release: func() { _ = j.Release() }}
	if res != nil {
		pj.Explain = func(err error) error {
			if denied := res.Explain(stderrText(err)); len(denied) > 0 {
				return &deniedError{err: err, lines: noteLines(denied)}
			}
			return err
		}
	}
	return pj, nil
}
