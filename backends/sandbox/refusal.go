package sandbox

import (
	"path/filepath"
	"strings"

	"github.com/agentpool/agentpool/backends"
)

// What a protected path is, in the reasons of refusals.
const (
	whatSecret    = "a secret"
	whatProtected = "a protected path"
)

// rules decide which paths may be granted: never the root, the home or
// an ancestor of it, nor anything that exposes a secret or a protected
// path, unless it lies inside an exempt path (the worktree, TMPDIR, the
// common git directory).
type rules struct {
	home    string
	secrets []string
	protect []Protected
	exempt  []string
}

// newRules are the rules of a launch.
func newRules(in PolicyInput) rules {
	ru := rules{}
	if in.Home != "" {
		ru.home = filepath.Clean(in.Home)
	}
	for _, e := range []string{in.Worktree, in.TmpDir, in.Git.CommonDir} {
		if e != "" {
			ru.exempt = append(ru.exempt, filepath.Clean(e))
		}
	}
	if in.Home != "" {
		for _, s := range secretPaths {
			p := filepath.Join(in.Home, s)
			ru.secrets = append(ru.secrets, p)
			ru.protect = append(ru.protect, Protected{Path: p, What: whatSecret})
		}
	}
	for _, p := range in.Protect {
		if p != "" {
			ru.protect = append(ru.protect, Protected{Path: filepath.Clean(p), What: whatProtected})
		}
	}
	for _, p := range in.Protected {
		if p.Path == "" {
			continue
		}
		what := p.What
		if what == "" {
			what = whatProtected
		}
		ru.protect = append(ru.protect, Protected{Path: filepath.Clean(p.Path), What: what})
	}
	return ru
}

// refusal is why a path cannot be granted.
type refusal struct {
	// root: the path is "/"; home: the home or an ancestor of it.
	root, home bool
	// target is the protected path exposed (with home: the home).
	target Protected
	// rel says how path relates to target.
	rel relation
}

// relation is how a refused path relates to what it would expose.
type relation int

const (
	relEqual    relation = iota // the path is the protected one
	relContains                 // the path is an ancestor of it
	relInside                   // the path lies beneath it
)

// check reports whether path may be granted, and if not why. path is
// clean, as the rules' paths are (so within needs no Clean: a launch
// checks a few hundred pairs).
func (ru rules) check(path string) (refusal, bool) {
	switch {
	case path == "/":
		return refusal{root: true}, false
	case ru.home != "" && within(ru.home, path):
		r := refusal{home: true, target: Protected{Path: ru.home}, rel: relContains}
		if path == ru.home {
			r.rel = relEqual
		}
		return r, false
	}
	for _, e := range ru.exempt {
		if within(path, e) {
			return refusal{}, true
		}
	}
	// The most specific protected path first: the checkout inside the
	// daemon's home is named as the checkout.
	best := -1
	for i, q := range ru.protect {
		if (within(q.Path, path) || within(path, q.Path)) && (best < 0 || len(q.Path) > len(ru.protect[best].Path)) {
			best = i
		}
	}
	if best < 0 {
		return refusal{}, true
	}
	q := ru.protect[best]
	r := refusal{target: q, rel: relInside}
	switch {
	case path == q.Path:
		r.rel = relEqual
	case within(q.Path, path):
		r.rel = relContains
	}
	return r, false
}

// exempted reports whether path lies within a path always granted (the
// worktree, its TMPDIR, the git paths).
func (ru rules) exempted(path string) bool {
	for _, e := range ru.exempt {
		if within(path, e) {
			return true
		}
	}
	return false
}

// within is isWithin for clean paths.
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || (len(path) > len(dir) && path[len(dir)] == '/' && path[:len(dir)] == dir)
}

// tilde writes path with "~/" for the home.
func (ru rules) tilde(path string) string {
	if ru.home != "" && path != ru.home && isWithin(path, ru.home) {
		return "~/" + strings.TrimPrefix(path, ru.home+"/")
	}
	return path
}

// note explains the refusal of path, requested as origin.
func (ru rules) note(path, origin string, why refusal) backends.SandboxNote {
	n := backends.SandboxNote{Path: path}
	pick := func(equal, contains, inside string) string {
		switch why.rel {
		case relEqual:
			return equal
		case relContains:
			return contains
		}
		return inside
	}
	narrow := "name the directories the agent needs inside it instead"
	switch {
	case why.root:
		n.Reason = "is the root directory: it holds every file, secrets included"
		n.Fix = "name the directories the agent needs instead"
	case why.home:
		n.Reason = pick("is your home directory", "contains your home directory", "") + ", secrets such as ~/.ssh included"
		n.Fix = "name the directories the agent needs, such as ~/.cache/tool"
	case why.target.What == whatSecret:
		t := ru.tilde(why.target.Path)
		n.Reason = pick("is a secret: "+t, "contains a secret: "+t, "lies inside a secret: "+t)
		n.Fix = pick("secrets are never granted to agents", narrow, "secrets are never granted to agents")
	default:
		t := why.target.What + " " + why.target.Path
		n.Reason = pick("is "+t, "contains "+t, "lies inside "+t)
		n.Fix = narrow
		if why.rel != relContains {
			n.Fix = "no agent may read it: move what the agent needs out of it"
			if strings.Contains(why.target.What, "checkout") {
				n.Fix = "the agent works in its session's worktree ($WORKTREE), never in the main checkout: move what it needs out of the checkout"
			} else if strings.Contains(why.target.What, "daemon") {
				n.Fix = "it holds the API token and every session's worktree, so no agent may read it: move what the agent needs out of it"
			}
		}
	}
	if origin == OriginScript {
		n.Reason = "the command's script " + n.Reason
		if why.rel != relContains {
			n.Fix = "move the script (and what it loads) elsewhere, such as /opt/<agent>"
		}
	}
	return n
}
