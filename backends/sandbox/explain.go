package sandbox

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentpool/agentpool/backends"
)

// deniedPatterns find the path of a refused access in a line of an
// agent's output, as the launcher, Node, Python, Go and shells word it.
// In a view of its own, a path the agent was not granted is missing
// (ENOENT) or read-only (EROFS) rather than refused (EACCES).
var deniedPatterns = []*regexp.Regexp{
	regexp.MustCompile(`agentpool sandbox: cannot read ("(?:[^"\\]|\\.)*")`),
	regexp.MustCompile(`(?:EACCES|EPERM|ENOENT|EROFS): [a-z -]+, \w+ '(/[^']+)'`),
	regexp.MustCompile(`\[Errno (?:13|1|2|30)\] [A-Za-z -]+: '(/[^']+)'`),
	regexp.MustCompile(`can't open file '(/[^']+)': \[Errno (?:13|1|2)\]`),
	regexp.MustCompile(`(?:open|stat|lstat|mkdir|remove|rename|readlink|chdir|fork/exec) (/[^:\s]+): (?:permission denied|operation not permitted|no such file or directory|read-only file system)`),
	regexp.MustCompile(`cannot (?:create|open) (/[^:\s]+): (?:Permission denied|Operation not permitted|No such file|Directory nonexistent|Read-only file system)`),
	regexp.MustCompile(`(?:^|[\s:'"])(/[^\s:'"]+): (?:Permission denied|Operation not permitted|No such file or directory|Read-only file system)`),
}

// Explain reads an agent's output (the stderr tail of a start that
// failed) for accesses the sandbox refused: a line of the launcher's, or
// a permission error next to an absolute path. For each path the policy
// does not cover, it says which entry ("sandbox.read" or
// "sandbox.write") to add, with what, or why it cannot be granted. A
// path the policy covers was refused for another reason (its mode), and
// is left out.
func (r PolicyResult) Explain(output string) []backends.SandboxNote {
	var notes []backends.SandboxNote
	seen := map[string]bool{}
	for _, line := range strings.Split(output, "\n") {
		if !mayBeDenial(line) {
			continue
		}
		for _, re := range deniedPatterns {
			m := re.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			path := m[1]
			if strings.HasPrefix(path, `"`) {
				var err error
				if path, err = strconv.Unquote(path); err != nil {
					continue
				}
			}
			if !seen[path] {
				seen[path] = true
				if n, ok := r.explainPath(path); ok {
					notes = append(notes, n)
				}
			}
			break
		}
	}
	return notes
}

// mayBeDenial reports whether line may report a refused access.
func mayBeDenial(line string) bool {
	l := strings.ToLower(line)
	return strings.Contains(l, "permission denied") || strings.Contains(l, "operation not permitted") ||
		strings.Contains(l, "no such file") || strings.Contains(l, "read-only file system") || strings.Contains(l, "directory nonexistent") ||
		strings.Contains(line, "EACCES") || strings.Contains(line, "EPERM") || strings.Contains(line, "ENOENT") ||
		strings.Contains(line, "EROFS") || strings.Contains(line, "agentpool sandbox: cannot read")
}

// explainPath says what would let the agent reach path.
func (r PolicyResult) explainPath(path string) (backends.SandboxNote, bool) {
	if path == "" || path[0] != '/' {
		return backends.SandboxNote{}, false
	}
	p := r.Policy
	canRead := covered(path, p.Read) || covered(path, p.Write) || covered(path, p.Devices)
	canWrite := covered(path, p.Write) || covered(path, p.Devices)
	fi, statErr := os.Stat(path)
	if os.IsNotExist(statErr) && covered(existingParent(path), p.Write) {
		// Missing where the agent may create it: missing indeed.
		return backends.SandboxNote{}, false
	}
	entry, verb := backends.EntryRead, "read"
	switch {
	case canRead && canWrite, canRead && covered(path, systemRead):
		// Granted, or a system directory the agent may only read: not
		// something to grant.
		return backends.SandboxNote{}, false
	case canRead, os.IsNotExist(statErr):
		// Reading is allowed (or there is nothing to read): the agent
		// wanted to write, or to create it.
		entry, verb = backends.EntryWrite, "write"
	}
	n := backends.SandboxNote{Path: path, Entry: entry, Reason: "the agent could not " + verb + " it under the sandbox"}
	grant := path
	switch {
	case statErr == nil && fi.IsDir():
	case entry == backends.EntryRead:
		grant = packageRoot(path)
	default:
		grant = existingParent(path)
	}
	if _, ok := r.rules.check(grant); !ok && grant != path {
		grant = path
	}
	if why, ok := r.rules.check(grant); !ok {
		refused := r.rules.note(grant, entry, why)
		n.Reason += "; it cannot be granted: it " + refused.Reason
		n.Fix = refused.Fix
		return n, true
	}
	n.Grant = r.rules.tilde(grant)
	n.Fix = r.fix(entry, n.Grant)
	return n, true
}

// existingParent is the nearest ancestor of path that exists.
func existingParent(path string) string {
	d := path
	for {
		d = d[:max(strings.LastIndexByte(d, '/'), 1)]
		if _, err := os.Stat(d); err == nil || d == "/" {
			return d
		}
	}
}

// fix is the sentence that tells how to add grant to entry: the whole
// list, since a provider's list replaces the default one.
func (r PolicyResult) fix(entry, grant string) string {
	cur := r.userRead
	key := "read"
	if entry == backends.EntryWrite {
		cur, key = r.userWrite, "write"
	}
	list := make([]string, 0, len(cur)+1)
	for _, c := range cur {
		list = append(list, strconv.Quote(r.rules.tilde(c)))
	}
	list = append(list, strconv.Quote(grant))
	return fmt.Sprintf(`add %q to the provider's %q in providers.json ("sandbox": {%q: [%s]}: the list replaces the default one)`,
		grant, entry, key, strings.Join(list, ", "))
}
