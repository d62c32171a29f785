package sandbox

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/agentpool/agentpool/backends"
)

// Policy is the Landlock rule set the launcher applies before it execs a
// program. Paths are absolute; a path that does not exist when the rules
// are applied is skipped.
type Policy struct {
	// Read lists paths granted for reading and executing.
	Read []string `json:"read,omitempty"`
	// Write lists paths granted for reading, writing and executing.
	Write []string `json:"write,omitempty"`
	// Devices lists device files and directories granted read, write and
	// ioctl (terminals).
	Devices []string `json:"devices,omitempty"`
	// Network is backends.NetworkAll, NetworkNone or NetworkList.
	Network string `json:"network,omitempty"`
	// Ports are the TCP ports connect(2) may reach with NetworkList.
	Ports []uint16 `json:"ports,omitempty"`
	// Required makes the launcher refuse to exec the program when the
	// kernel cannot apply the rules.
	Required bool `json:"required,omitempty"`
	// Check lists files the program cannot run without (the script an
	// interpreter runs): the launcher, once restricted, makes sure it can
	// read them, and otherwise exits with ExitDenied and a line that
	// names the path.
	Check []string `json:"check,omitempty"`
	// Nice, when above 0, lowers the program's CPU priority to that nice
	// value (and that of its session's scheduling group, when it leads a
	// session of its own): an agent's work — a build, a flood of output —
	// yields to the daemon that serves every session.
	Nice int `json:"nice,omitempty"`
	// View, when set, runs the program in namespaces of its own that show
	// it only what the policy grants (see View). The launcher then makes
	// them as it starts (Jail.Prepare sets EnvUnshare).
	View *View `json:"view,omitempty"`
	// NoRules applies no Landlock rules and no view: the program runs
	// with the daemon's view of the machine, but still with no
	// capabilities and no-new-privs (a provider whose sandbox is off).
	NoRules bool `json:"no_rules,omitempty"`
	// Joined, when set, is the mount namespace ("mnt:[N]") of another
	// launcher whose namespaces this one has joined (a terminal its
	// agent's, see EnvNsenter): it builds no view, the network namespace
	// confines the network, and it refuses to run the program anywhere
	// else.
	Joined string `json:"joined,omitempty"`
}

// AgentNice is the nice value programs run under a policy: on a machine
// whose CPUs are all busy, the daemon (nice 0) gets about three times an
// agent's share, so that one agent cannot slow every other session's
// turns; on an idle machine it changes nothing.
const AgentNice = 5

// systemRead are the directories every program needs to read and execute.
var systemRead = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
	"/nix/store", "/snap", "/proc", "/sys", "/dev", "/run/systemd/resolve",
}

// SystemReadable returns the system directory every confined program may
// read (and so see in its view) that path lies in, "" when none: a
// secret of the daemon's there is within every agent's reach.
func SystemReadable(path string) string {
	path = filepath.Clean(path)
	for _, d := range append(slices.Clone(systemRead), viewSystem...) {
		if d != "/proc" && d != "/sys" && d != "/dev" && isWithin(path, d) {
			return d
		}
	}
	return ""
}

// systemDevices are the device files programs open for writing.
var systemDevices = []string{
	"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
	"/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm",
}

// secretPaths, under the user's home, are never granted, nor anything
// above them: credentials, and the browsers' profiles and keyrings (the
// web page's credential lives in the browser's storage, on disk).
var secretPaths = []string{
	".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc",
	".git-credentials", ".config/gh", ".config/gcloud", ".password-store", ".pki",
	".config/chromium", ".config/google-chrome", ".config/google-chrome-beta",
	".config/google-chrome-unstable", ".config/BraveSoftware", ".config/microsoft-edge",
	".config/vivaldi", ".config/opera", ".mozilla", ".librewolf", ".local/share/keyrings",
	"snap/chromium", "snap/firefox", "snap/brave", "snap/opera",
	".var/app/org.chromium.Chromium", ".var/app/com.google.Chrome", ".var/app/org.mozilla.firefox",
	".var/app/com.brave.Browser",
}

// GitPaths are the parts of the main repository a session's agent needs to
// commit on its own branch: the common git directory (read), its object
// store, the branch's ref directory and reflog, and the worktree's admin
// directory (write).
type GitPaths struct {
	// CommonDir is the repository's git directory (".git" of the main
	// checkout): granted for reading only, so hooks and config stay out of
	// the agent's reach.
	CommonDir string
	// AdminDir is the worktree's directory under CommonDir/worktrees.
	AdminDir string
	// Branch is the session's branch ("agentpool/<session>").
	Branch string
	// View is the session's private git view; zero without one (the
	// agent then writes the shared object store and ref directory, as
	// far as Landlock lets it).
	View GitView
}

// GitView is where an agent's git writes land when it runs in a mount
// namespace of its own: the shared object store and ref directories stay
// read-only in its view, and the daemon imports what it added, verified,
// at each checkpoint (worktree.Manager.ImportAgentHistory).
type GitView struct {
	// ObjectsUpper and ObjectsWork are the upper and work directories of
	// an overlay mounted on CommonDir/objects: new objects land in
	// ObjectsUpper, and an object the agent rewrites changes only its own
	// view. Both are on one filesystem, outside every grant.
	ObjectsUpper, ObjectsWork string
	// Refs is mounted on the session branch's ref directory
	// (CommonDir/refs/heads/<dir of Branch>): it holds that branch's
	// loose ref and nothing else, so no other session's branch can move.
	Refs string
	// Logs is mounted on the branch's reflog directory likewise.
	Logs string
}

// Set reports whether v names a view.
func (v GitView) Set() bool {
	return v.ObjectsUpper != "" && v.ObjectsWork != "" && v.Refs != "" && v.Logs != ""
}

// PolicyInput is what BuildPolicy needs to know about one launch.
type PolicyInput struct {
	// Sandbox is the provider's policy, as resolved by the registry.
	Sandbox backends.SandboxSpec
	// Worktree is the session's worktree (read-write); relative script
	// arguments are taken relative to it.
	Worktree string
	// TmpDir is the private TMPDIR (read-write).
	TmpDir string
	// Exe is the program's absolute path; its installation is readable.
	Exe string
	// Args are the program's arguments (argv[1:]). When the program is an
	// interpreter (node, python3, bun, uv run, ...), the script they name
	// is readable, with its package root.
	Args []string
	// PATH is the program's search path: its absolute entries are readable.
	PATH string
	// Env are the paths the agent's environment names
	// (backends.EnvPaths): readable, or writable for state directories.
	Env []backends.EnvPath
	// Git locates the repository; zero when the worktree has none.
	Git GitPaths
	// Home is the user's home directory: never granted as a whole, nor the
	// secrets under it.
	Home string
	// GitConfig are git's per-user configuration files (~/.gitconfig,
	// $XDG_CONFIG_HOME/git/config, ...): always readable, like the system
	// directories, whatever Sandbox.Read says, since without them every
	// git command of the agent's fails when they exist (git refuses a
	// configuration file it cannot read).
	GitConfig []string
	// Protect are further paths never granted, nor anything above or below
	// them, except the worktree, TmpDir and the Git paths: the daemon's
	// home and the main checkout.
	Protect []string
	// Protected are further protected paths, as Protect, each with what
	// it is, for the reasons of refusals.
	Protected []Protected
}

// Protected is a path no grant may expose, and what it is ("the daemon's
// home", "the main checkout") for the reason of a refusal.
type Protected struct {
	// Path is absolute.
	Path string
	// What names it in a sentence: "the daemon's home".
	What string
}

// Origins of a grant, in Refusal.Origin.
const (
	// OriginRead and OriginWrite are the provider's "sandbox.read" and
	// "sandbox.write" entries: what the user asked for.
	OriginRead  = backends.EntryRead
	OriginWrite = backends.EntryWrite
	// OriginScript is the script an interpreter command names.
	OriginScript = "script"
	// OriginDerived is a grant the daemon derived: the program's
	// installation, PATH entries, a script's package root.
	OriginDerived = "derived"
	// OriginEnv is a path a variable of the agent's environment names (a
	// credentials file, a CA bundle, a state directory).
	OriginEnv = backends.EntryEnv
)

// Refusal is a grant BuildPolicy refused.
type Refusal struct {
	// Origin is OriginRead, OriginWrite, OriginScript, OriginEnv or
	// OriginDerived.
	Origin string
	// Note says which path, why, and what to do instead.
	Note backends.SandboxNote
}

// Shown reports whether the refusal matters to the user: a grant they
// asked for, or a script the agent cannot run without. A derived grant
// that is refused (the directory around a program that is itself granted)
// is not.
func (r Refusal) Shown() bool { return r.Origin != OriginDerived }

// PolicyResult is a Policy and what building it refused.
type PolicyResult struct {
	// Policy is what the launcher applies.
	Policy Policy
	// Refused lists the grants refused, in the order they were asked.
	Refused []Refusal
	// Notes are the Notes of the refusals that are Shown.
	Notes []backends.SandboxNote

	rules               rules
	userRead, userWrite []string
}

// BuildPolicy turns a provider's sandbox settings and a launch's facts into
// the rules the launcher applies. Grants that would expose a protected path
// are dropped, and reported in the second result (PolicyFor says why).
func BuildPolicy(in PolicyInput) (Policy, []string) {
	r := PolicyFor(in)
	dropped := make([]string, 0, len(r.Refused))
	for _, f := range r.Refused {
		dropped = append(dropped, f.Note.Path)
	}
	return r.Policy, dropped
}

// PolicyFor is BuildPolicy with the reason of each refusal, and what the
// user should change.
func PolicyFor(in PolicyInput) PolicyResult {
	sb := in.Sandbox
	p := Policy{Network: sb.Network, Ports: slices.Clone(sb.Ports), Required: sb.Required, Nice: AgentNice}
	if p.Network == "" {
		p.Network = backends.NetworkAll
	}
	if p.Network == backends.NetworkList && len(sb.Hosts) > 0 {
		// Landlock filters ports, not hosts: a list that names hosts is
		// left to the egress proxy, and Landlock sets no network rule.
		p.Network, p.Ports = backends.NetworkAll, nil
	}
	var read, write []grant
	add := func(list *[]grant, origin string, paths ...string) {
		for _, path := range paths {
			*list = append(*list, grant{path: path, origin: origin})
		}
	}
	addEnv := func(list *[]grant, write bool) {
		for _, e := range in.Env {
			if e.Write == write {
				*list = append(*list, grant{path: e.Path, origin: OriginEnv, variable: e.Name})
			}
		}
	}
	add(&read, OriginDerived, systemRead...)
	add(&read, OriginDerived, in.GitConfig...)
	add(&read, OriginDerived, installDirs(in.Exe, in.PATH)...)
	for _, dir := range filepath.SplitList(in.PATH) {
		if filepath.IsAbs(dir) {
			add(&read, OriginDerived, filepath.Clean(dir))
		}
	}
	scripts := scriptFiles(in.Exe, in.Args, in.Worktree, in.PATH)
	for _, s := range scripts {
		add(&read, OriginDerived, packageRoot(s))
	}
	add(&read, OriginRead, expandAll(sb.Read, in.Worktree)...)
	addEnv(&read, false)
	add(&write, OriginDerived, in.Worktree, in.TmpDir)
	add(&write, OriginWrite, expandAll(sb.Write, in.Worktree)...)
	addEnv(&write, true)
	if g := in.Git; g.CommonDir != "" {
		add(&read, OriginDerived, g.CommonDir)
		add(&write, OriginDerived, filepath.Join(g.CommonDir, "objects"))
		if g.AdminDir != "" {
			add(&write, OriginDerived, g.AdminDir)
		}
		if dir := filepath.Dir(g.Branch); g.Branch != "" && dir != "." {
			add(&write, OriginDerived,
				filepath.Join(g.CommonDir, "refs", "heads", dir),
				filepath.Join(g.CommonDir, "logs", "refs", "heads", dir))
		}
	}
	ru := newRules(in)
	res := PolicyResult{rules: ru, userRead: slices.Clone(sb.Read), userWrite: slices.Clone(sb.Write)}
	refuse := func(origin, entry, path, variable string, why refusal) {
		for _, f := range res.Refused {
			if f.Origin == origin && f.Note.Path == path {
				return
			}
		}
		n := ru.note(path, origin, why)
		switch origin {
		case OriginRead, OriginWrite:
			n.Entry = entry
		case OriginEnv:
			n.Entry = backends.EntryEnv
			n.Reason = variable + " names it, and it " + n.Reason
		}
		res.Refused = append(res.Refused, Refusal{Origin: origin, Note: n})
	}
	keep := func(entry string, grants []grant) []string {
		var out []string
		for _, g := range grants {
			path := g.path
			if path == "" || !filepath.IsAbs(path) {
				continue
			}
			path = filepath.Clean(path)
			if why, ok := ru.check(path); !ok {
				refuse(g.origin, entry, path, g.variable, why)
				continue
			}
			// What it leads to must be grantable too: a symlink into a
			// secret or the daemon's home grants its target.
			if real, err := filepath.EvalSymlinks(path); err == nil && real != path && !ru.exempted(path) {
				if why, ok := ru.check(real); !ok {
					refuse(g.origin, entry, path, g.variable, why)
					continue
				}
			}
			if !slices.Contains(out, path) {
				out = append(out, path)
			}
		}
		return out
	}
	p.Read = keep(backends.EntryRead, read)
	// The program itself (and its interpreter, and the script an
	// interpreter runs) is always readable, as a file and nothing around
	// it, even where its directory is refused: a binary built inside the
	// checkout the session works on (the quick start's bin/agentpool
	// running its demo agent) must still run. Only a secret, the home or
	// a protected path (for a script) is never granted.
	for _, f := range programFiles(in.Exe, in.PATH) {
		if !exposes(f, ru.secrets, nil) && !slices.Contains(p.Read, f) {
			p.Read = append(p.Read, f)
		}
	}
	for _, s := range scripts {
		if covered(s, p.Read) {
			p.Check = append(p.Check, s)
			continue
		}
		if why, ok := ru.check(s); !ok {
			// The launcher stops at once, naming it, rather than let the
			// interpreter fail its own way.
			refuse(OriginScript, "", s, "", why)
			p.Check = append(p.Check, s)
			continue
		}
		p.Read = append(p.Read, s)
		p.Check = append(p.Check, s)
	}
	p.Write = keep(backends.EntryWrite, write)
	p.Devices = slices.Clone(systemDevices)
	p.View = viewFor(in)
	var socks []grant
	add(&socks, OriginWrite, expandAll(sb.Sockets, in.Worktree)...)
	p.View.Sockets = keep(EntrySockets, socks)
	res.Policy = p
	for _, f := range res.Refused {
		if f.Shown() {
			res.Notes = append(res.Notes, f.Note)
		}
	}
	return res
}

// viewFor is the view of a launch where namespaces are allowed: the
// home as an empty directory, the session's private git view, the
// system's secrets hidden.
func viewFor(in PolicyInput) *View {
	v := &View{Home: in.Home, Hide: hiddenFiles()}
	if g := in.Git; g.CommonDir != "" && g.View.Set() {
		if dir := filepath.Dir(g.Branch); g.Branch != "" && dir != "." {
			v.Git = &GitMounts{
				Objects: filepath.Join(g.CommonDir, "objects"),
				Refs:    filepath.Join(g.CommonDir, "refs", "heads", dir),
				Logs:    filepath.Join(g.CommonDir, "logs", "refs", "heads", dir),
				View:    g.View,
			}
		}
	}
	return v
}

// hiddenFiles are the system's files that only root may read, which a
// root daemon's agents (uid 0, without capabilities) would otherwise read
// as their owner: password hashes, sudo's rules, the host's ssh keys.
// systemSecrets (computed once by the Manager) adds the rest.
func hiddenFiles() []string {
	out := []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/security/opasswd"}
	keys, _ := filepath.Glob("/etc/ssh/ssh_host_*_key")
	return append(out, keys...)
}

// systemSecretDirs are the system directories searched for secrets.
var systemSecretDirs = []string{"/etc", "/opt"}

// maxSecretScan bounds the entries systemSecrets looks at.
const maxSecretScan = 20000

// systemSecrets lists the files and directories of the system
// directories shown in a view that the daemon's user may read only as
// their owner — owned by its uid, not readable by others: private keys
// under /etc/ssl/private, a VPN's or a wifi network's secrets. Agents run
// as the daemon's uid, so the view hides them (a directory as an empty
// one, a file as an empty file). What is made after the daemon started is
// not in the list.
func systemSecrets() []string {
	uid := uint32(os.Getuid())
	var out []string
	n := 0
	for _, root := range systemSecretDirs {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			n++
			if err != nil || n > maxSecretScan {
				if d != nil && d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.Type()&os.ModeSymlink != 0 || (!d.IsDir() && !d.Type().IsRegular()) {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			st, ok := info.Sys().(*syscall.Stat_t)
			if !ok || st.Uid != uid || info.Mode().Perm()&0o004 != 0 {
				return nil
			}
			out = append(out, path)
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		})
	}
	return out
}

// EntrySockets is a provider's "sandbox.sockets" list, in the notes of
// its refusals.
const EntrySockets = "sandbox.sockets"

// grant is a path asked for, and where the request came from (with
// OriginEnv, the variable that names it).
type grant struct {
	path     string
	origin   string
	variable string
}

// covered reports whether path lies within one of grants.
func covered(path string, grants []string) bool {
	for _, g := range grants {
		if isWithin(path, g) {
			return true
		}
	}
	return false
}

// exposes reports whether granting path would grant a protected path (an
// ancestor or equal of one) or lies inside one, unless it lies inside an
// exempt path.
func exposes(path string, protect, exempt []string) bool {
	for _, e := range exempt {
		if e != "" && isWithin(path, e) {
			return false
		}
	}
	for _, q := range protect {
		if q == "" {
			continue
		}
		if isWithin(q, path) || isWithin(path, q) {
			return true
		}
	}
	return false
}

// isWithin reports whether path is dir or lies beneath it.
func isWithin(path, dir string) bool {
	dir = filepath.Clean(dir)
	path = filepath.Clean(path)
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// expandAll replaces $WORKTREE in each path.
func expandAll(paths []string, worktree string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if rest, ok := strings.CutPrefix(p, "$WORKTREE"); ok && (rest == "" || rest[0] == '/') {
			p = worktree + rest
		}
		out = append(out, p)
	}
	return out
}

// installDirs returns the directories of a program's installation: the
// directory of the resolved executable (its parent when that is a bin
// directory), the package root when it lies in a node_modules tree, and
// the same for the interpreter its #! line names.
func installDirs(exe, path string) []string {
	var out []string
	add := func(p string) {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return
		}
		out = append(out, installRoot(real))
		if p != real {
			out = append(out, installRoot(p))
		}
	}
	if exe == "" {
		return nil
	}
	add(exe)
	if interp := shebang(exe); interp != "" {
		if !filepath.IsAbs(interp) {
			interp = lookPath(interp, path)
		}
		if interp != "" {
			add(interp)
		}
	}
	return out
}

// programFiles returns the resolved executable and the interpreter its #!
// line names (and the paths through which they were named).
func programFiles(exe, path string) []string {
	if exe == "" {
		return nil
	}
	var out []string
	add := func(p string) {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			out = append(out, filepath.Clean(p), real)
		}
	}
	add(exe)
	if interp := shebang(exe); interp != "" {
		if !filepath.IsAbs(interp) {
			interp = lookPath(interp, path)
		}
		if interp != "" {
			add(interp)
		}
	}
	return out
}

// nodePackage returns the package directory ("…/node_modules/pkg" or
// "…/node_modules/@scope/pkg") that dir lies in, the innermost one.
func nodePackage(dir string) (string, bool) {
	parts := strings.Split(dir, string(filepath.Separator))
	for i := len(parts) - 1; i >= 0; i-- {
		if parts[i] != "node_modules" || i+1 >= len(parts) {
			continue
		}
		end := i + 2
		if strings.HasPrefix(parts[i+1], "@") && i+2 < len(parts) {
			end = i + 3
		}
		return strings.Join(parts[:end], string(filepath.Separator)), true
	}
	return "", false
}

// installRoot is the directory to grant for the installed file p.
func installRoot(p string) string {
	dir := filepath.Dir(p)
	if root, ok := nodePackage(dir); ok {
		return root
	}
	if filepath.Base(dir) == "bin" {
		return filepath.Dir(dir)
	}
	return dir
}

// shebang returns the interpreter named by the #! line of file, resolving
// "/usr/bin/env NAME" to NAME.
func shebang(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return ""
	}
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return ""
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return ""
	}
	if filepath.Base(fields[0]) == "env" {
		for _, f := range fields[1:] {
			if !strings.HasPrefix(f, "-") {
				return f
			}
		}
		return ""
	}
	return fields[0]
}

// lookPath finds name in the absolute directories of path.
func lookPath(name, path string) string {
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
