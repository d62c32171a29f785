package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/registry"
)

// renderConfinement prints how the daemon confines agents, when it said:
// containment, Landlock, and namespaces or "Landlock only" with what that
// leaves open, why, and how to fix it.
func (c *cli) renderConfinement() {
	st := c.confine
	if st == nil {
		return
	}
	line := "confinement: " + st.Containment
	if st.Cgroup != "" {
		line += " (" + st.Cgroup + ")"
	}
	switch {
	case st.Landlock == 0:
		line += ", no Landlock"
	case st.Namespaces:
		line += fmt.Sprintf(", Landlock ABI %d, namespaces (the network through the egress proxy only)", st.Landlock)
	default:
		line += fmt.Sprintf(", Landlock ABI %d, Landlock only (no namespaces)", st.Landlock)
	}
	fmt.Fprintln(c.stdout, line)
	for _, w := range st.Warnings {
		what, fix, ok := landlockOnly(w, st.NamespacesError)
		if !ok {
			fmt.Fprintln(c.stdout, "  warning: "+w)
			continue
		}
		fmt.Fprintln(c.stdout, "  warning: "+what)
		if st.NamespacesError != "" {
			fmt.Fprintln(c.stdout, "      why: "+st.NamespacesError)
		}
		if fix != "" {
			fmt.Fprintln(c.stdout, "      fix: "+fix)
		}
	}
	fmt.Fprintln(c.stdout)
}

// landlockOnly splits the warning of a machine without namespaces
// (sandbox.LandlockOnlyWarning, then the reason in parentheses) into what
// agents can reach and how to fix it; ok is false for another warning.
func landlockOnly(w, reason string) (what, fix string, ok bool) {
	if !strings.HasPrefix(w, sandbox.LandlockOnlyWarning) {
		return "", "", false
	}
	what, fix, _ = strings.Cut(sandbox.LandlockOnlyWarning, "; ")
	if rest := strings.TrimPrefix(w, sandbox.LandlockOnlyWarning); rest != "" && rest != " ("+reason+")" {
		return "", "", false // more than the reason: show it whole
	}
	return what, fix, true
}

// sandboxLabel says in a few words how a provider's agents are confined on
// a machine whose confinement is st (nil: the daemon did not say):
// "confined" in namespaces, whose network goes through the egress proxy;
// "landlock only" without them, where a list that names hosts is not
// enforced; or why its agents are refused or unconfined.
func sandboxLabel(sb backends.SandboxSpec, st *sandbox.Status) string {
	switch {
	case !sb.Enabled:
		return "off"
	case st != nil && st.Landlock == 0 && sb.Required:
		return "REFUSED (no Landlock)"
	case st != nil && st.Landlock == 0:
		return "UNCONFINED (no Landlock)"
	case st != nil && !st.Namespaces && sb.Required:
		return "REFUSED (no namespaces)"
	}
	label := "net:" + networkLabel(sb)
	switch {
	case st == nil:
	case st.Namespaces:
		label = "confined " + label
	default:
		label = "landlock only " + label + landlockNetGap(sb, st.Landlock)
	}
	if sb.Required {
		label += " required"
	}
	return label
}

// networkLabel is a sandbox's network in a word: all, none, or its list.
func networkLabel(sb backends.SandboxSpec) string {
	if sb.Network != backends.NetworkList {
		if sb.Network == "" {
			return backends.NetworkAll
		}
		return sb.Network
	}
	list := make([]string, 0, len(sb.Ports)+len(sb.Hosts))
	for _, p := range sb.Ports {
		list = append(list, strconv.Itoa(int(p)))
	}
	return strings.Join(append(list, sb.Hosts...), ",")
}

// landlockNetGap says what of a network setting Landlock alone does not
// enforce: a list that names hosts (the egress proxy's, which needs
// namespaces), and "none" or a list on a kernel before Landlock ABI 4.
func landlockNetGap(sb backends.SandboxSpec, abi int) string {
	switch {
	case sb.Network == backends.NetworkList && len(sb.Hosts) > 0:
		return " (NOT enforced: hosts need namespaces)"
	case (sb.Network == backends.NetworkList || sb.Network == backends.NetworkNone) && abi < 4:
		return fmt.Sprintf(" (NOT enforced: Landlock ABI %d < 4)", abi)
	}
	return ""
}

// renderNetworkRefused prints, per provider, the last connections the
// egress proxy refused its agents, each with the network setting that
// would allow it.
func (c *cli) renderNetworkRefused(snap registry.Snapshot) {
	header := false
	for _, p := range snap.Providers {
		for _, n := range p.NetworkRefused {
			if !header {
				fmt.Fprintln(c.stdout, "\nnetwork refused (the newest first):")
				header = true
			}
			where := ""
			if n.Session != "" {
				where = " in session " + n.Session
			}
			fmt.Fprintf(c.stdout, "  %s: %s (%s), %s%s\n", p.ID, hostPort(n.Host, n.Port), n.Reason, n.Time.Local().Format(time.DateTime), where)
			if n.Allow != "" {
				fmt.Fprintf(c.stdout, "      %s\n", allowHint(p.Sandbox, n.Allow))
			}
		}
	}
}

// allowHint says what "sandbox.network" to write to allow entry, given
// the provider's sandbox: its list with the entry added, or, in place of
// "all" (which never opens a private address), a list, which allows only
// what it names.
func allowHint(sb backends.SandboxSpec, entry string) string {
	if sb.Network != backends.NetworkList {
		return fmt.Sprintf(`allow it with a list in place of %q, which allows only what it names: "sandbox.network": [443, %q]`, networkLabel(sb), entry)
	}
	list := make([]any, 0, len(sb.Ports)+len(sb.Hosts)+1)
	for _, p := range sb.Ports {
		list = append(list, p)
	}
	for _, h := range sb.Hosts {
		list = append(list, h)
	}
	b, _ := json.Marshal(append(list, entry))
	return `allow it with "sandbox.network": ` + strings.ReplaceAll(string(b), ",", ", ")
}

// hostPort joins a host and a port, bracketing an IPv6 address.
func hostPort(host string, port uint16) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(int(port))
}
