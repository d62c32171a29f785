package registry

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/agentpool/agentpool/backends"
)

// state is what Snapshot and Resolve read: built whole under Registry.mu,
// then swapped in atomically, never changed.
type state struct {
	snap Snapshot
	byID map[string]*providerState
}

// providerState is one provider of a state: its status, its launch spec,
// the variables its agent's login methods name (Spec.AuthEnv, from its
// last probe), and the error Resolve returns instead of the spec (nil
// when launchable).
type providerState struct {
	status  ProviderStatus
	spec    backends.Spec
	authEnv []string
	err     error
}

// commitLocked builds the state from the registry's fields and, if the
// snapshot differs from the current one, swaps it in under a new version and
// publishes the change.
func (r *Registry) commitLocked() {
	old := r.cur.Load()
	next := r.buildLocked()
	change, changed := diff(old, next)
	if !changed && old.snap.DefaultAgent == next.snap.DefaultAgent {
		return
	}
	r.version++
	next.snap.Version = r.version
	change.Version = r.version
	r.cur.Store(next)
	switch {
	case next.snap.Diagnostic != "" && next.snap.Diagnostic != old.snap.Diagnostic:
		r.log.Warn("providers file rejected; the last good config stays in force",
			logVersion, r.version, logError, next.snap.Diagnostic)
	case next.snap.Diagnostic == "" && old.snap.Diagnostic != "":
		r.log.Info("providers file accepted", logVersion, r.version)
	}
	if len(change.Added)+len(change.Removed)+len(change.Enabled)+len(change.Disabled)+len(change.SpecChanged) > 0 {
		r.log.Info("providers changed", logVersion, r.version, logChange, change)
	}
	r.publishLocked(change)
}

// buildLocked computes the state the registry's fields describe. It drops
// probe results taken of a spec that is no longer the provider's.
func (r *Registry) buildLocked() *state {
	ids := slices.Sorted(maps.Keys(r.defs))
	st := &state{
		snap: Snapshot{ETag: r.read.etag(), File: r.cfg.Path, Diagnostic: r.diag, PathEnv: r.cfg.PathEnv, DefaultAgent: r.settings.defaultAgent,
			Providers: make([]ProviderStatus, 0, len(ids))},
		byID: make(map[string]*providerState, len(ids)),
	}
	for _, id := range ids {
		d, l := r.defs[id], r.lookups[id]
		p := &providerState{spec: specOf(d, l, r.cfg.Home)}
		p.status = ProviderStatus{ID: id, Label: d.label, Description: d.description, Kind: d.kind,
			Enabled: d.enabled, Path: l.path, Command: d.command, BuiltIn: d.builtIn, Sandbox: p.spec.Sandbox,
			MCPServers: d.mcpServers.Redact()}
		if !d.budget.IsZero() {
			b := d.budget
			p.status.Budget = &b
		}
		p.status.Spares = d.spares
		rec := r.probes[id]
		if rec != nil && !sameLaunch(rec.spec, p.spec) {
			delete(r.probes, id)
			rec = nil
		}
		if rec != nil {
			p.status.Probe = rec.info
		}
		var refusedAuth []string
		p.authEnv, refusedAuth = authEnvOf(rec)
		p.status.PassEnv, p.status.AuthEnv = slices.Clone(p.spec.PassEnv), slices.Clone(p.authEnv)
		p.status.EnvNotes = envNotes(d, refusedAuth)
		p.status.SandboxNotes = r.sandboxNotesLocked(id, p.spec)
		if rep := r.launches[id]; rep != nil && !sameLaunch(rep.spec, p.spec) {
			// Said of a launch of another spec.
			delete(r.launches, id)
		} else if rep != nil {
			p.status.LastLaunch = rep
		}
		if rl := r.refused[id]; rl != nil && !sameNetwork(rl.network, p.spec.Sandbox) {
			// Refused under another network setting.
			delete(r.refused, id)
		} else if rl != nil {
			p.status.NetworkRefused = rl.list
		}
		s := &p.status
		switch {
		case !d.enabled:
			s.Status, s.Diagnostic = StatusDisabled, "disabled in "+r.cfg.Path
			p.err = errorOf(ErrDisabled, "provider %q is disabled in %s (enable it with: agentpool providers enable %s, or set \"enabled\": true there)",
				id, r.cfg.Path, id)
		case l.status == StatusNotInstalled:
			s.Status, s.Diagnostic = StatusNotInstalled, l.diag
			where := ""
			if l.searched {
				where = " (PATH=" + r.cfg.PathEnv + ")"
			}
			p.err = errorOf(ErrNotInstalled, "provider %q is not installed: %s%s", id, l.diag, where)
		case l.status == StatusError:
			s.Status, s.Diagnostic = StatusError, l.diag
			p.err = fmt.Errorf("provider %q cannot run: %s: %w", id, l.diag, ErrConfig)
		case r.inflight[id] != nil:
			s.Status = StatusProbing
		case rec != nil && rec.info.NeedsAuth:
			s.Status, s.Diagnostic = StatusNeedsAuth, needsAuthDiagnostic(id, rec.info)
		case rec != nil && rec.info.Error != "":
			// A failed probe is shown, but does not block launching: a
			// real session may well succeed where the probe did not.
			s.Status, s.Diagnostic = StatusError, "probe failed: "+rec.info.Error
		default:
			s.Status = StatusReady
		}
		st.snap.Providers = append(st.snap.Providers, p.status)
		st.byID[id] = p
	}
	for id := range r.refused {
		if r.defs[id] == nil { // removed: a provider added again starts afresh
			delete(r.refused, id)
		}
	}
	return st
}

// specOf is the launch spec of d with its program found at l and "~/" in
// its sandbox paths expanded to home.
func specOf(d *definition, l lookup, home string) backends.Spec {
	s := backends.Spec{
		Provider:     d.id,
		Kind:         d.kind,
		Path:         l.path,
		TurnTimeout:  d.turnTimeout,
		IdleTimeout:  d.idleTimeout,
		Mode:         d.mode,
		Compat:       d.compat,
		PTY:          d.pty,
		Sandbox:      resolveSandbox(d.sandbox, home),
		MCPServers:   d.mcpServers.Clone(),
		Budget:       d.budget,
		Handoff:      d.handoff,
		HandoffBytes: d.handoffBytes,
		PassEnv:      slices.Clone(d.passEnv),
	}
	if len(d.command) > 1 {
		s.Args = slices.Clone(d.command[1:])
	}
	for _, k := range slices.Sorted(maps.Keys(d.env)) {
		s.Env = append(s.Env, k+"="+d.env[k])
	}
	if len(d.permissions) > 0 {
		s.Permissions = maps.Clone(d.permissions)
	}
	if len(d.config) > 0 {
		s.Config = maps.Clone(d.config)
	}
	return s
}

// cloneSpec returns a copy of s that shares nothing with it.
func cloneSpec(s backends.Spec) backends.Spec {
	s.Args = slices.Clone(s.Args)
	s.Env = slices.Clone(s.Env)
	s.PassEnv = slices.Clone(s.PassEnv)
	s.AuthEnv = slices.Clone(s.AuthEnv)
	s.Permissions = maps.Clone(s.Permissions)
	s.Config = maps.Clone(s.Config)
	s.PTY.ResumeArgs = slices.Clone(s.PTY.ResumeArgs)
	s.Sandbox = cloneSandbox(s.Sandbox)
	s.MCPServers = s.MCPServers.Clone()
	return s
}

// diff reports what changed from old to next, and whether the snapshot
// changed at all.
func diff(old, next *state) (Change, bool) {
	c := Change{Diagnostic: next.snap.Diagnostic}
	updated := false
	for _, n := range next.snap.Providers {
		id := n.ID
		o := old.byID[id]
		switch {
		case o == nil:
			c.Added = append(c.Added, id)
			continue
		case !o.status.Enabled && n.Enabled:
			c.Enabled = append(c.Enabled, id)
		case o.status.Enabled && !n.Enabled:
			c.Disabled = append(c.Disabled, id)
		}
		switch {
		case !sameLaunch(o.spec, next.byID[id].spec):
			c.SpecChanged = append(c.SpecChanged, id)
		case o.status.Enabled == n.Enabled && !reflect.DeepEqual(o.status, n):
			c.Updated = append(c.Updated, id)
		default:
			continue
		}
		updated = true
	}
	for _, o := range old.snap.Providers {
		if next.byID[o.ID] == nil {
			c.Removed = append(c.Removed, o.ID)
		}
	}
	changed := updated || len(c.Added)+len(c.Removed)+len(c.Enabled)+len(c.Disabled) > 0 ||
		old.snap.ETag != next.snap.ETag || old.snap.Diagnostic != next.snap.Diagnostic ||
		old.snap.File != next.snap.File
	return c, changed
}

// needsAuthDiagnostic says how to log in the agent of provider id, whose
// last probe found it needs a login: agentpool login when it offers a
// way, else its own words and the command they name.
func needsAuthDiagnostic(id string, info *ProbeInfo) string {
	if len(info.Auth) > 0 {
		return fmt.Sprintf("the agent needs you to log in: agentpool login %s", id)
	}
	var b strings.Builder
	b.WriteString("the agent needs you to log in, and offers no way to do it through agentpool")
	if info.AuthMessage != "" {
		fmt.Fprintf(&b, "; it says: %q", info.AuthMessage)
	}
	if info.LoginCommand != "" {
		fmt.Fprintf(&b, "; log in with %s in your terminal", info.LoginCommand)
	} else {
		b.WriteString("; log in as its documentation says")
	}
	fmt.Fprintf(&b, ", then: agentpool providers refresh %s", id)
	return b.String()
}
