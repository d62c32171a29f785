package main

import (
	"fmt"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/registry"
)

// renderSandboxNotes prints, under the providers table, the grants the
// sandbox refuses and the paths it denied at a provider's last launch,
// each with why and what to change.
func (c *cli) renderSandboxNotes(snap registry.Snapshot) {
	header := false
	say := func(id, where string, n backends.SandboxNote) {
		if !header {
			fmt.Fprintln(c.stdout, "\nsandbox:")
			header = true
		}
		entry := n.Entry
		if entry == "" {
			entry = "command"
		}
		fmt.Fprintf(c.stdout, "  %s: %s %s %s: %s\n", id, where, entry, termLine(n.Path), termText(n.Reason))
		if n.Fix != "" {
			fmt.Fprintf(c.stdout, "      %s\n", n.Fix)
		}
	}
	for _, p := range snap.Providers {
		for _, n := range p.SandboxNotes {
			say(p.ID, "refused", n)
		}
		if l := p.LastLaunch; l != nil {
			for _, n := range l.Refused {
				if !hasNote(p.SandboxNotes, n) {
					say(p.ID, "refused (session "+l.Session+")", n)
				}
			}
			for _, n := range l.Denied {
				say(p.ID, "denied at start (session "+l.Session+")", n)
			}
		}
	}
}

func hasNote(notes []backends.SandboxNote, n backends.SandboxNote) bool {
	for _, m := range notes {
		if m == n {
			return true
		}
	}
	return false
}

// renderEnvNotes prints, under the providers table, what of a provider's
// environment its agents do not get, and why.
func (c *cli) renderEnvNotes(snap registry.Snapshot) {
	header := false
	for _, p := range snap.Providers {
		for _, n := range p.EnvNotes {
			if !header {
				fmt.Fprintln(c.stdout, "\nenvironment:")
				header = true
			}
			fmt.Fprintf(c.stdout, "  %s: %s\n", p.ID, n)
		}
	}
}
