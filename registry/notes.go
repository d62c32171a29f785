package registry

import (
	"slices"

	"github.com/agentpool/agentpool/backends"
)

// LaunchReport is what the sandbox said of one launch of a provider.
type LaunchReport struct {
	// Session is the session the agent was launched for.
	Session string `json:"session"`
	// Refused are the grants the daemon refused for the launch: entries
	// of "sandbox.read" or "sandbox.write" that would expose the main
	// checkout of the session's repository, say.
	Refused []backends.SandboxNote `json:"refused,omitempty"`
	// Denied are the paths the agent was denied when its start failed,
	// each with the entry that would allow it.
	Denied []backends.SandboxNote `json:"denied,omitempty"`
	// Error is the failed start's error; "" when the agent started.
	Error string `json:"error,omitempty"`

	// spec is the provider's spec the launch was made with.
	spec backends.Spec
}

// sandboxNotes caches Config.SandboxNotes for one spec.
type sandboxNotes struct {
	spec  backends.Spec
	notes []backends.SandboxNote
}

// sandboxNotesLocked returns the session-independent refusals of spec,
// computed once per spec.
func (r *Registry) sandboxNotesLocked(id string, spec backends.Spec) []backends.SandboxNote {
	if r.cfg.SandboxNotes == nil {
		return nil
	}
	if c, ok := r.notes[id]; ok && sameLaunch(c.spec, spec) {
		return c.notes
	}
	notes := r.cfg.SandboxNotes(cloneSpec(spec))
	r.notes[id] = sandboxNotes{spec: spec, notes: notes}
	return notes
}

// SetLaunchReport records what the sandbox said of a launch of provider
// id made with spec (its Dir aside), shown as the provider's LastLaunch
// until the next launch or a change of its spec. A report with nothing
// refused and nothing denied clears it. Unknown providers are ignored.
func (r *Registry) SetLaunchReport(id string, spec backends.Spec, rep LaunchReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.defs[id] == nil {
		return
	}
	if len(rep.Refused) == 0 && len(rep.Denied) == 0 {
		if r.launches[id] == nil {
			return
		}
		delete(r.launches, id)
	} else {
		spec.Dir = ""
		rep.Refused, rep.Denied = slices.Clone(rep.Refused), slices.Clone(rep.Denied)
		rep.spec = cloneSpec(spec)
		r.launches[id] = &rep
	}
	r.commitLocked()
}
