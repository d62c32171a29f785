package catalog

import (
	"fmt"
	"maps"
	"path"
	"runtime"
	"slices"
	"strings"
)

// AgentsDir is where the install step of a binary distribution unpacks
// it: AgentsDir/ID/VERSION/, "~/" being the daemon user's home. The
// providers file resolves "~/" in commands the same way.
const AgentsDir = "~/.local/share/agentpool/agents"

// Entry is a catalog agent as agentpool offers it: the registry's words
// and what a provider for it runs.
type Entry struct {
	// ID is the registry's id of the agent.
	ID          string `json:"id"`
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description"`
	Repository  string `json:"repository,omitempty"`
	License     string `json:"license,omitempty"`
	// Provider is the provider id it becomes: the built-in's when BuiltIn,
	// else the id proposed for a new entry of providers.json.
	Provider string `json:"provider"`
	// BuiltIn says agentpool has it built in: only its install is needed.
	BuiltIn bool `json:"built_in"`
	// Distribution is the kind used on this platform: npx, uvx or binary;
	// "" when the agent has none for it (Unavailable says why).
	Distribution string `json:"distribution,omitempty"`
	// Command is what the provider runs (for a built-in: its command).
	Command []string `json:"command,omitempty"`
	// Env is the environment the provider gets: the distribution's and
	// agentpool's recommendations.
	Env map[string]string `json:"env,omitempty"`
	// Install is the shell command that installs the agent.
	Install string `json:"install,omitempty"`
	// Note is advice: login, runtime needs.
	Note string `json:"note,omitempty"`
	// Unavailable says why the agent cannot run on this platform.
	Unavailable string `json:"unavailable,omitempty"`
}

// Platform returns the registry's name of the platform this binary runs
// on ("linux-x86_64", "linux-aarch64", ...).
func Platform() string {
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	if arch == "" {
		arch = runtime.GOARCH
	}
	return runtime.GOOS + "-" + arch
}

// Entries turns the document's agents into entries for platform, in the
// document's order.
func (d *Document) Entries(platform string) []Entry {
	out := make([]Entry, 0, len(d.Agents))
	for _, a := range d.Agents {
		out = append(out, a.Entry(platform))
	}
	return out
}

// Entry is agent a as offered on platform. The distribution is chosen in
// the order npx, uvx, binary (a package manager keeps it up to date; a
// binary for another platform is of no use). What agentpool knows of the
// agent (see hints) overrides the provider id, and for a built-in its
// command and install step.
func (a Agent) Entry(platform string) Entry {
	e := Entry{ID: a.ID, Name: a.Name, Version: a.Version, Description: a.Description,
		Repository: a.Repository, License: a.License, Provider: a.ID}
	h, known := hintFor(a.ID)
	var env map[string]string
	switch d := a.Distribution; {
	case d.NPX != nil:
		spec := withVersion(d.NPX.Package, "@", a.Version)
		e.Distribution = KindNPX
		e.Command = append([]string{"npx", "-y", spec}, d.NPX.Args...)
		e.Install = "npm install -g " + shellQuote(spec)
		env = d.NPX.Env
	case d.UVX != nil:
		e.Distribution = KindUVX
		e.Command, e.Install = uvxCommand(d.UVX.Package, a.Version, d.UVX.Args)
		env = d.UVX.Env
	case d.Binary[platform].Cmd != "":
		t := d.Binary[platform]
		dir := path.Join(AgentsDir, a.ID, a.Version)
		e.Distribution = KindBinary
		e.Command = append([]string{path.Join(dir, path.Clean(strings.TrimPrefix(t.Cmd, "./")))}, t.Args...)
		e.Install = binaryInstall(dir, t)
		env = t.Env
	default:
		e.Unavailable = fmt.Sprintf("%s has no distribution for %s", a.Name, platform)
	}
	e.Env = maps.Clone(env)
	if known {
		if h.provider != "" {
			e.Provider = h.provider
		}
		e.BuiltIn = h.builtIn
		if h.command != nil {
			// The built-in's command (or the one agentpool prefers), and
			// the install that provides it.
			e.Command = h.command
			e.Install = h.install
			e.Unavailable = ""
			e.Env = nil
		}
		for k, v := range h.env {
			if e.Env == nil {
				e.Env = map[string]string{}
			}
			e.Env[k] = v
		}
		e.Note = h.note
	}
	// A provider's environment from the catalog is a third party's word:
	// one that would make the agent's program run other code, or trust
	// other servers, is refused, named, never written unseen.
	if k := unsafeKey(e.Env); k != "" {
		e.Unavailable = fmt.Sprintf("the catalog's %s sets %s in the agent's environment, which makes a program run other code or trust other servers; not offered (add it to providers.json by hand if you trust it)", a.Name, k)
	}
	return e
}

// unsafeKey is the first, in order, of env's names that UnsafeEnv
// refuses, or "".
func unsafeKey(env map[string]string) string {
	keys := slices.Sorted(maps.Keys(env))
	for _, k := range keys {
		if UnsafeEnv(k) {
			return k
		}
	}
	return ""
}

// withVersion is spec pinned to version with sep ("@" for npm and uvx)
// unless it names a version already.
func withVersion(spec, sep, version string) string {
	name := spec
	if strings.HasPrefix(spec, "@") {
		// @scope/name[@version]
		if i := strings.Index(spec[1:], "@"); i >= 0 {
			return spec
		}
	} else if strings.Contains(name, "@") {
		return spec
	}
	return name + sep + version
}

// uvxCommand is the command and install step of a PyPI package. uvx runs
// the command named like the package; "pkg@1.2.3" pins an exact version
// (the registry also writes "pkg==1.2.3", which uvx reads only through
// --from, as it does extras and ranges).
func uvxCommand(spec, version string, args []string) (cmd []string, install string) {
	name := spec
	if i := strings.IndexAny(spec, "[=<>~!,;@ "); i >= 0 {
		name = spec[:i]
	}
	switch {
	case name == spec:
		pinned := spec + "@" + version
		return append([]string{"uvx", pinned}, args...), "uv tool install " + shellQuote(pinned)
	case strings.HasPrefix(spec[len(name):], "@"):
		return append([]string{"uvx", spec}, args...), "uv tool install " + shellQuote(spec)
	case strings.HasPrefix(spec[len(name):], "==") && !strings.ContainsAny(spec[len(name)+2:], "=<>~!,;[ "):
		pinned := name + "@" + spec[len(name)+2:]
		return append([]string{"uvx", pinned}, args...), "uv tool install " + shellQuote(pinned)
	}
	return append([]string{"uvx", "--from", spec, name}, args...), "uv tool install " + shellQuote(spec)
}

// binaryInstall is the shell line that downloads t's archive and unpacks
// it into dir, by the archive's name.
func binaryInstall(dir string, t BinaryTarget) string {
	qdir := `"$HOME"/` + shellQuote(strings.TrimPrefix(dir, "~/"))
	url := shellQuote(t.Archive)
	name := strings.ToLower(path.Base(t.Archive))
	mk := "mkdir -p " + qdir + " && "
	switch {
	case strings.HasSuffix(name, ".tar.gz"), strings.HasSuffix(name, ".tgz"):
		return mk + "curl -fsSL " + url + " | tar -xz -C " + qdir
	case strings.HasSuffix(name, ".tar.bz2"), strings.HasSuffix(name, ".tbz2"):
		return mk + "curl -fsSL " + url + " | tar -xj -C " + qdir
	case strings.HasSuffix(name, ".tar.xz"), strings.HasSuffix(name, ".txz"):
		return mk + "curl -fsSL " + url + " | tar -xJ -C " + qdir
	case strings.HasSuffix(name, ".tar"):
		return mk + "curl -fsSL " + url + " | tar -x -C " + qdir
	case strings.HasSuffix(name, ".zip"):
		return mk + "curl -fsSL -o " + qdir + "/archive.zip " + url + " && unzip -o -d " + qdir + " " + qdir + "/archive.zip && rm " + qdir + "/archive.zip"
	}
	// A bare executable.
	prog := qdir + "/" + shellQuote(path.Clean(strings.TrimPrefix(t.Cmd, "./")))
	return mk + "curl -fsSL -o " + prog + " " + url + " && chmod +x " + prog
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
