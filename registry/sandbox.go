package registry

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/egress"
)

// worktreeVar stands for the session's worktree in a sandbox path. The
// registry keeps it literally in the Spec; the launcher replaces it.
const worktreeVar = "$WORKTREE"

// maxPort is the highest TCP port.
const maxPort = 65535

// CommonWritable returns the caches every provider may write unless its
// "sandbox.write" says otherwise: the built-ins and the bases "acp" and
// "pty" start with these paths after their own state directories, and an
// entry that sets "write" replaces the whole list, these included. Paths
// start with "~/" (the home directory of Config.Home); "~/.cache" holds
// Go's build cache and most tools' caches.
func CommonWritable() []string {
	return []string{"~/.cache", "~/.npm", "~/go/pkg/mod"}
}

// CommonReadable returns the files every provider may read unless its
// "sandbox.read" says otherwise, the way CommonWritable does for writes:
// git's per-user configuration, without which commits in the worktree
// have no author.
func CommonReadable() []string {
	return []string{"~/.gitconfig", "~/.config/git"}
}

// defaultSandbox is the sandbox of a built-in with the given state
// directories, and (with none) of a provider extending "acp" or "pty":
// enabled, every network port, the common paths. The state directories
// (not the files of stateFiles) are made when they are missing, so that
// an agent's first start under the sandbox finds them.
func defaultSandbox(stateDirs ...string) backends.SandboxSpec {
	var mk []string
	for _, p := range stateDirs {
		if !slices.Contains(stateFiles, p) {
			mk = append(mk, p)
		}
	}
	return backends.SandboxSpec{
		Enabled:  true,
		Read:     CommonReadable(),
		Write:    append(slices.Clone(stateDirs), CommonWritable()...),
		MakeDirs: mk,
		Network:  backends.NetworkAll,
	}
}

// sandboxEntry is the "sandbox" object of an entry. Nil pointers and nil
// slices are the fields it leaves unset.
type sandboxEntry struct {
	enabled  *bool
	read     []string
	write    []string
	sockets  []string
	network  *string
	ports    []uint16
	hosts    []string
	required *bool
}

// sandboxFields lists the fields of an entry's "sandbox" object.
func sandboxFields() []string {
	return []string{"enabled", "read", "write", "sockets", "network", "required"}
}

// sandbox decodes an entry's "sandbox" object.
func (c *checker) sandbox(n *node, path string) *sandboxEntry {
	if !c.want(n, kindObject, path) {
		return nil
	}
	out := &sandboxEntry{}
	for _, m := range n.members {
		fp := joinPath(path, m.key)
		switch m.key {
		case "enabled":
			if b, ok := c.boolean(m.val, fp); ok {
				out.enabled = &b
			}
		case "required":
			if b, ok := c.boolean(m.val, fp); ok {
				out.required = &b
			}
		case "read":
			out.read = c.sandboxPaths(m.val, fp)
		case "write":
			out.write = c.sandboxPaths(m.val, fp)
		case "sockets":
			out.sockets = c.sandboxPaths(m.val, fp)
		case "network":
			if mode, ports, hosts, ok := c.network(m.val, fp); ok {
				out.network, out.ports, out.hosts = &mode, ports, hosts
			}
		default:
			c.unknown(m, fp, sandboxFields())
		}
	}
	return out
}

// sandboxPaths decodes a list of sandbox paths, cleaned, or nil when the
// list has a problem.
func (c *checker) sandboxPaths(n *node, path string) []string {
	if !c.want(n, kindArray, path) {
		return nil
	}
	out := make([]string, 0, len(n.elems))
	ok := true
	for i, e := range n.elems {
		ep := fmt.Sprintf("%s[%d]", path, i)
		s, good := c.str(e, ep)
		if good {
			if msg := checkSandboxPath(s); msg != "" {
				c.add(e.off, ep, "%s", msg)
				good = false
			}
		}
		ok = ok && good
		out = append(out, filepath.Clean(s))
	}
	if !ok {
		return nil
	}
	return out
}

// checkSandboxPath returns why p cannot be a sandbox path, or "". A path
// is absolute, starts with "~/", or is "$WORKTREE" or starts with
// "$WORKTREE/"; it has no ".." component and no other "$".
func checkSandboxPath(p string) string {
	const want = `want an absolute path, "~/..." or "$WORKTREE/..."`
	rest := p
	switch {
	case p == "":
		return "must not be empty (" + want + ")"
	case strings.ContainsRune(p, 0):
		return "contains a NUL byte"
	case p == worktreeVar || strings.HasPrefix(p, worktreeVar+"/"):
		rest = p[len(worktreeVar):]
	case strings.HasPrefix(p, "~/"):
		if filepath.Clean(p) == "~" {
			return fmt.Sprintf("%q is the whole home directory, secrets such as ~/.ssh included (name the directories the agent needs)", p)
		}
		rest = p[1:]
	case strings.HasPrefix(p, "~"):
		return fmt.Sprintf("%q: only \"~/\" is expanded (%s)", p, want)
	case strings.HasPrefix(p, "$"):
		name, _, _ := strings.Cut(p, "/")
		return fmt.Sprintf("unknown variable %q: only $WORKTREE is expanded (%s)", name, want)
	case !filepath.IsAbs(p):
		return fmt.Sprintf("relative path %q (%s)", p, want)
	}
	if strings.Contains(rest, "$") {
		return fmt.Sprintf("%q: no variable but a leading $WORKTREE is expanded, and \"$\" is not allowed elsewhere", p)
	}
	if slices.Contains(strings.Split(rest, "/"), "..") {
		return fmt.Sprintf("%q has a \"..\" component (name the directory itself)", p)
	}
	return ""
}

// network decodes "network": "all", "none" or a non-empty allow-list of
// TCP ports (numbers) and host entries (strings in the forms
// egress.ParseHost reads), returned sorted without duplicates, the hosts
// in their canonical form.
func (c *checker) network(n *node, path string) (string, []uint16, []string, bool) {
	const want = `"all", "none" or an array of TCP ports and hosts`
	switch n.kind {
	case kindString:
		switch n.str {
		case backends.NetworkAll, backends.NetworkNone:
			return n.str, nil, nil, true
		}
		c.add(n.off, path, "unknown network %q (want %s)%s", n.str, want,
			suggest(n.str, []string{backends.NetworkAll, backends.NetworkNone}))
		return "", nil, nil, false
	case kindArray:
	case kindNull:
		c.add(n.off, path, "null is not allowed here (want %s; remove the field to use the default)", want)
		return "", nil, nil, false
	default:
		c.add(n.off, path, "want %s, got %s", want, n.kind)
		return "", nil, nil, false
	}
	if len(n.elems) == 0 {
		c.add(n.off, path, "want at least one port or host (\"none\" refuses every connection)")
		return "", nil, nil, false
	}
	var ports []uint16
	var hosts []string
	ok := true
	for i, e := range n.elems {
		ep := fmt.Sprintf("%s[%d]", path, i)
		switch e.kind {
		case kindNumber:
			if p := c.bounded(e, ep, 1, maxPort); p != nil {
				ports = append(ports, uint16(*p))
			} else {
				ok = false
			}
		case kindString:
			if h := c.networkHost(e, ep); h != "" {
				hosts = append(hosts, h)
			} else {
				ok = false
			}
		default:
			c.add(e.off, ep, "want a number (a port) or a string (a host), got %s", e.kind)
			ok = false
		}
	}
	if !ok {
		return "", nil, nil, false
	}
	slices.Sort(ports)
	slices.Sort(hosts)
	return backends.NetworkList, slices.Compact(ports), slices.Compact(hosts), true
}

// networkHost checks a host entry of "network" and returns its canonical
// form, or "" when it is invalid.
func (c *checker) networkHost(n *node, path string) string {
	if _, err := strconv.ParseUint(n.str, 10, 64); err == nil {
		c.add(n.off, path, "want a number, got string %q (write the port without quotes: %s)", n.str, n.str)
		return ""
	}
	h, err := egress.ParseHost(n.str)
	if err != nil {
		c.add(n.off, path, "%v", err)
		return ""
	}
	return h.String()
}

// applySandbox sets the sandbox fields e sets on d: each replaces the
// inherited value, lists included; "network" replaces the ports and hosts
// too.
func applySandbox(d *definition, e *sandboxEntry) {
	if e == nil {
		return
	}
	s := &d.sandbox
	if e.enabled != nil {
		s.Enabled = *e.enabled
	}
	if e.read != nil {
		s.Read = slices.Clone(e.read)
	}
	if e.write != nil {
		s.Write = slices.Clone(e.write)
		for _, p := range e.write {
			if madeDir(p) && !slices.Contains(s.MakeDirs, p) {
				s.MakeDirs = append(s.MakeDirs, p)
			}
		}
	}
	if e.sockets != nil {
		s.Sockets = slices.Clone(e.sockets)
	}
	if e.network != nil {
		s.Network, s.Ports, s.Hosts = *e.network, slices.Clone(e.ports), slices.Clone(e.hosts)
	}
	if e.required != nil {
		s.Required = *e.required
	}
}

// madeDir reports whether p, an entry of a provider's "sandbox.write",
// is a directory the daemon makes before a launch when it is missing: a
// path that cannot be granted until it exists, and that an agent in its
// view cannot make itself. The common caches are left alone (a provider
// that lists them again does not make ~/go appear), and so is a path
// whose name has an extension (~/.claude.json), most likely a file the
// agent writes, which an empty directory would break. "$WORKTREE" paths
// are the worktree's, always writable.
func madeDir(p string) bool {
	if strings.HasPrefix(p, worktreeVar) || slices.Contains(CommonWritable(), p) {
		return false
	}
	return filepath.Ext(strings.TrimLeft(filepath.Base(p), ".")) == ""
}

// cloneSandbox returns a copy of s that shares nothing with it.
func cloneSandbox(s backends.SandboxSpec) backends.SandboxSpec {
	s.Read = slices.Clone(s.Read)
	s.Write = slices.Clone(s.Write)
	s.Sockets = slices.Clone(s.Sockets)
	s.MakeDirs = slices.Clone(s.MakeDirs)
	s.Ports = slices.Clone(s.Ports)
	s.Hosts = slices.Clone(s.Hosts)
	return s
}

// resolveSandbox is s with "~/" expanded to home, duplicates dropped and
// empty lists nil. "$WORKTREE" stays for the launcher.
func resolveSandbox(s backends.SandboxSpec, home string) backends.SandboxSpec {
	expand := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			if rest, ok := strings.CutPrefix(p, "~/"); ok {
				p = filepath.Join(home, rest)
			}
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
		return out
	}
	s.Read, s.Write, s.Sockets, s.MakeDirs = expand(s.Read), expand(s.Write), expand(s.Sockets), expand(s.MakeDirs)
	s.Ports = slices.Clone(s.Ports)
	if len(s.Ports) == 0 {
		s.Ports = nil
	}
	s.Hosts = slices.Clone(s.Hosts)
	if len(s.Hosts) == 0 {
		s.Hosts = nil
	}
	if s.Network == "" {
		s.Network = backends.NetworkAll
	}
	return s
}
