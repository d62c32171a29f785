package registry

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// FileVersion is the only providers.json "version" this agentpool reads.
const FileVersion = 1

// Limits of the providers file.
const (
	maxFileSize    = 1 << 20
	maxDiagnostics = 10
	maxIDLength    = 64
	maxTimeout     = 7 * 24 * time.Hour
	maxQuietWindow = 10 * time.Minute
	minCols        = 20
	minRows        = 5
	maxCols        = 1000
	maxRows        = 1000
)

// document is a decoded providers file: its entries in file order.
type document struct {
	entries []*entry
	// defaultAgent is "default_agent", nil when unset; defaultAgentOff
	// its offset, for a diagnostic found after composing.
	defaultAgent    *string
	defaultAgentOff int
	// mcpServers are the top-level "mcp_servers": every ACP provider's
	// agents get them, a provider's own server replacing one of its name.
	mcpServers backends.MCPServers
}

// entry is one provider entry of the file. Pointer and nil slice fields are
// the ones the entry leaves unset; at holds the value node of every field
// that is set, for diagnostics found after decoding.
type entry struct {
	id     string
	keyOff int
	at     map[string]*node

	extends          *string
	enabled          *bool
	label            *string
	description      *string
	command          []string
	env              map[string]string
	passEnv          []string
	permissions      map[string]string
	config           map[string]string
	mode             *string
	idleTimeout      *time.Duration
	turnTimeout      *time.Duration
	missingFileEmpty *bool
	noCancelRequest  *bool
	readyPattern     *string
	busyPattern      *string
	quietWindow      *time.Duration
	cols             *int
	rows             *int
	spares           *int
	cancelKeys       *string
	clearKeys        *string
	cancelMin        *time.Duration
	ignorePatterns   []string
	resumeArgs       []string
	sandbox          *sandboxEntry
	mcpServers       backends.MCPServers
	budget           *backends.Budget
	handoff          *string
	handoffBytes     *int
}

// checker collects the diagnostics of one document.
type checker struct {
	file string
	data []byte
	errs []error
}

// add records a problem at offset off of the document.
func (c *checker) add(off int, path, format string, args ...any) {
	if len(c.errs) == maxDiagnostics {
		c.errs = append(c.errs, fmt.Errorf("%s: too many errors, stopping", c.file))
	}
	if len(c.errs) > maxDiagnostics {
		return
	}
	line, col := lineCol(c.data, off)
	c.errs = append(c.errs, &ValidationError{File: c.file, Path: path, Line: line, Col: col,
		Msg: fmt.Sprintf(format, args...)})
}

// err returns the collected problems, nil when there are none.
func (c *checker) err() error {
	return errors.Join(c.errs...)
}

// decodeDocument checks the structure of the whole document and decodes its
// entries. Problems are recorded in c.
func decodeDocument(c *checker, root *node) *document {
	doc := &document{}
	if root.kind != kindObject {
		c.add(root.off, "", "want a JSON object, got %s", root.kind)
		return doc
	}
	var sawVersion bool
	for _, m := range root.members {
		path := joinPath("", m.key)
		switch m.key {
		case "$schema":
			c.str(m.val, path)
		case "version":
			sawVersion = true
			if n, ok := c.integer(m.val, path); ok && n != FileVersion {
				c.add(m.val.off, path, "unsupported version %d (this agentpool reads version %d)", n, FileVersion)
			}
		case "providers":
			if !c.want(m.val, kindObject, path) {
				continue
			}
			for _, pm := range m.val.members {
				if e := c.entry(pm, joinPath(path, pm.key)); e != nil {
					doc.entries = append(doc.entries, e)
				}
			}
		case "default_agent":
			if v, ok := c.str(m.val, path); ok {
				doc.defaultAgent, doc.defaultAgentOff = &v, m.val.off
			}
		case "mcp_servers":
			doc.mcpServers = c.mcpServers(m.val, path) // mcp.go
		default:
			c.unknown(m, path, []string{"$schema", "version", "default_agent", "providers", "mcp_servers"})
		}
	}
	if !sawVersion {
		c.add(root.off, "version", "missing (add \"version\": %d)", FileVersion)
	}
	return doc
}

// MaxSpares bounds a provider's "spares": each is a started agent and a
// worktree kept per repository.
const MaxSpares = 8

// entryFields lists the fields of a provider entry.
func entryFields() []string {
	return []string{"extends", "enabled", "label", "description", "command", "env", "pass_env", "permissions",
		"mode", "config", "idle_timeout", "turn_timeout", "compat", "ready_pattern", "busy_pattern", "quiet_window", "cols",
		"rows", "cancel_keys", "clear_keys", "cancel_min_interval", "ignore_patterns", "resume_args", "sandbox", "mcp_servers", "budget", "spares",
		"handoff", "handoff_bytes"}
}

// compatFields lists the fields of an entry's "compat" object.
func compatFields() []string { return []string{"missing_file_empty", "no_cancel_request"} }

// entry decodes one provider entry.
func (c *checker) entry(m member, path string) *entry {
	if msg := checkID(m.key); msg != "" {
		c.add(m.keyOff, path, "%s", msg)
	}
	if !c.want(m.val, kindObject, path) {
		return nil
	}
	e := &entry{id: m.key, keyOff: m.keyOff, at: make(map[string]*node)}
	for _, f := range m.val.members {
		fp := joinPath(path, f.key)
		n := f.val
		e.at[f.key] = n
		switch f.key {
		case "extends":
			e.extends = c.nonEmpty(n, fp)
		case "enabled":
			if b, ok := c.boolean(n, fp); ok {
				e.enabled = &b
			}
		case "label":
			e.label = c.nonEmpty(n, fp)
		case "description":
			if s, ok := c.str(n, fp); ok {
				e.description = &s
			}
		case "command":
			if list, ok := c.strList(n, fp); ok {
				if len(list) == 0 || list[0] == "" {
					c.add(n.off, fp, "want the program and its arguments, e.g. [\"codex-acp\"]")
				} else {
					e.command = list
				}
			}
		case "resume_args":
			if list, ok := c.strList(n, fp); ok {
				e.resumeArgs = list
			}
		case "env":
			e.env = c.env(n, fp)
		case "pass_env":
			e.passEnv = c.passEnv(n, fp)
		case "permissions":
			e.permissions = c.permissions(n, fp)
		case "mode":
			if s, ok := c.str(n, fp); ok {
				if s != "" && s != "default" && s != "full" {
					c.add(n.off, fp, "unknown mode %q (want \"default\" or \"full\")", s)
				}
				if s == "default" {
					s = ""
				}
				e.mode = &s
			}
		case "config":
			e.config = c.configDefaults(n, fp)
		case "idle_timeout":
			e.idleTimeout = c.duration(n, fp, maxTimeout)
		case "turn_timeout":
			e.turnTimeout = c.duration(n, fp, maxTimeout)
		case "quiet_window":
			e.quietWindow = c.duration(n, fp, maxQuietWindow)
		case "compat":
			e.missingFileEmpty, e.noCancelRequest = c.compat(n, fp)
		case "ready_pattern":
			if s, ok := c.str(n, fp); ok {
				if _, err := regexp.Compile(s); err != nil {
					c.add(n.off, fp, "invalid regular expression: %v", err)
				}
				e.readyPattern = &s
			}
		case "busy_pattern":
			if s, ok := c.str(n, fp); ok {
				if _, err := regexp.Compile(s); err != nil {
					c.add(n.off, fp, "invalid regular expression: %v", err)
				}
				e.busyPattern = &s
			}
		case "cols":
			e.cols = c.bounded(n, fp, minCols, maxCols)
		case "rows":
			e.rows = c.bounded(n, fp, minRows, maxRows)
		case "cancel_keys":
			e.cancelKeys = c.nonEmpty(n, fp)
		case "clear_keys":
			if s, ok := c.str(n, fp); ok {
				e.clearKeys = &s
			}
		case "cancel_min_interval":
			e.cancelMin = c.duration(n, fp, maxQuietWindow)
		case "ignore_patterns":
			if list, ok := c.strList(n, fp); ok {
				for _, s := range list {
					if _, err := regexp.Compile(s); err != nil {
						c.add(n.off, fp, "invalid regular expression %q: %v", s, err)
					}
				}
				e.ignorePatterns = list
			}
		case "sandbox":
			e.sandbox = c.sandbox(n, fp)
		case "mcp_servers":
			e.mcpServers = c.mcpServers(n, fp)
		case "budget":
			e.budget = c.budget(n, fp) // budget.go
		case "spares":
			e.spares = c.bounded(n, fp, 0, MaxSpares)
		case "handoff":
			if s, ok := c.str(n, fp); ok {
				if s != "brief" && s != "off" && s != "type" {
					c.add(n.off, fp, "unknown handoff %q (want \"brief\", \"off\" or, for a terminal program, \"type\")", s)
				}
				e.handoff = &s
			}
		case "handoff_bytes":
			e.handoffBytes = c.bounded(n, fp, backends.MinBriefingBytes, backends.MaxBriefingBytes)
		default:
			delete(e.at, f.key)
			c.unknown(f, fp, entryFields())
		}
	}
	return e
}

// compat decodes an entry's "compat" object: its switches, nil where
// not set.
func (c *checker) compat(n *node, path string) (missingFileEmpty, noCancelRequest *bool) {
	if !c.want(n, kindObject, path) {
		return nil, nil
	}
	for _, m := range n.members {
		fp := joinPath(path, m.key)
		var dst **bool
		switch m.key {
		case "missing_file_empty":
			dst = &missingFileEmpty
		case "no_cancel_request":
			dst = &noCancelRequest
		default:
			c.unknown(m, fp, compatFields())
			continue
		}
		if b, ok := c.boolean(m.val, fp); ok {
			*dst = &b
		}
	}
	return missingFileEmpty, noCancelRequest
}

func (c *checker) env(n *node, path string) map[string]string {
	if !c.want(n, kindObject, path) {
		return nil
	}
	out := make(map[string]string, len(n.members))
	for _, m := range n.members {
		fp := joinPath(path, m.key)
		if m.key == "" || strings.ContainsAny(m.key, "=\x00") {
			c.add(m.keyOff, fp, "invalid environment variable name %q", m.key)
		}
		if s, ok := c.str(m.val, fp); ok {
			if strings.ContainsRune(s, 0) {
				c.add(m.val.off, fp, "value contains a NUL byte")
			}
			out[m.key] = s
		}
	}
	return out
}

// passEnv decodes a "pass_env" list: the names (or prefixes ending in
// "*") of the daemon's variables the agent gets, nil when the list has a
// problem. An empty list passes nothing beyond the base.
func (c *checker) passEnv(n *node, path string) []string {
	if !c.want(n, kindArray, path) {
		return nil
	}
	out := make([]string, 0, len(n.elems))
	ok := true
	for i, e := range n.elems {
		ep := fmt.Sprintf("%s[%d]", path, i)
		s, good := c.str(e, ep)
		if good {
			if msg := backends.CheckPassEnv(s); msg != "" {
				c.add(e.off, ep, "%s", msg)
				good = false
			}
		}
		ok = ok && good
		out = append(out, s)
	}
	if !ok {
		return nil
	}
	return out
}

// configDefaults decodes a "config" object: session config option (or
// "mode") to the value the agent should start with.
func (c *checker) configDefaults(n *node, path string) map[string]string {
	if !c.want(n, kindObject, path) {
		return nil
	}
	out := make(map[string]string, len(n.members))
	for _, m := range n.members {
		fp := joinPath(path, m.key)
		if strings.TrimSpace(m.key) == "" {
			c.add(m.keyOff, fp, "empty option name (want \"mode\" or a config option id or category, e.g. \"model\")")
			continue
		}
		if v := c.nonEmpty(m.val, fp); v != nil {
			out[m.key] = *v
		}
	}
	return out
}

func (c *checker) permissions(n *node, path string) map[string]string {
	if !c.want(n, kindObject, path) {
		return nil
	}
	out := make(map[string]string, len(n.members))
	for _, m := range n.members {
		fp := joinPath(path, m.key)
		if !validAction(m.key) {
			c.add(m.keyOff, fp, "unknown action %q (want one of %s)%s", m.key,
				strings.Join(permissionActions(), ", "), suggest(m.key, permissionActions()))
		}
		if s, ok := c.str(m.val, fp); ok {
			switch s {
			case "allow", "ask", "deny":
				out[m.key] = s
			default:
				c.add(m.val.off, fp, "unknown decision %q (want allow, ask or deny)", s)
			}
		}
	}
	return out
}

// permissionActions lists the action keys a "permissions" map accepts.
func permissionActions() []string {
	return []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch",
		"switch_mode", "other", "fs.read", "fs.write", "terminal"}
}

func validAction(a string) bool {
	for _, v := range permissionActions() {
		if a == v {
			return true
		}
	}
	return false
}

// want checks the kind of n.
func (c *checker) want(n *node, k nodeKind, path string) bool {
	if n.kind == k {
		return true
	}
	if n.kind == kindNull {
		c.add(n.off, path, "null is not allowed here (want %s %s; remove the field to use the default)", article(k), k)
		return false
	}
	c.add(n.off, path, "want %s %s, got %s", article(k), k, n.kind)
	return false
}

func article(k nodeKind) string {
	if k == kindArray || k == kindObject {
		return "an"
	}
	return "a"
}

func (c *checker) str(n *node, path string) (string, bool) {
	if !c.want(n, kindString, path) {
		return "", false
	}
	return n.str, true
}

func (c *checker) nonEmpty(n *node, path string) *string {
	s, ok := c.str(n, path)
	if !ok {
		return nil
	}
	if strings.TrimSpace(s) == "" {
		c.add(n.off, path, "must not be empty")
		return nil
	}
	return &s
}

func (c *checker) boolean(n *node, path string) (bool, bool) {
	if !c.want(n, kindBool, path) {
		return false, false
	}
	return n.b, true
}

func (c *checker) strList(n *node, path string) ([]string, bool) {
	if !c.want(n, kindArray, path) {
		return nil, false
	}
	out := make([]string, 0, len(n.elems))
	ok := true
	for i, e := range n.elems {
		ep := fmt.Sprintf("%s[%d]", path, i)
		s, good := c.str(e, ep)
		if good && strings.ContainsRune(s, 0) {
			c.add(e.off, ep, "contains a NUL byte")
			good = false
		}
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

func (c *checker) integer(n *node, path string) (int, bool) {
	if !c.want(n, kindNumber, path) {
		return 0, false
	}
	v, err := strconv.Atoi(n.num.String())
	if err != nil {
		c.add(n.off, path, "want an integer, got %s", n.num)
		return 0, false
	}
	return v, true
}

func (c *checker) bounded(n *node, path string, lo, hi int) *int {
	v, ok := c.integer(n, path)
	if !ok {
		return nil
	}
	if v < lo || v > hi {
		c.add(n.off, path, "%d is out of range [%d, %d]", v, lo, hi)
		return nil
	}
	return &v
}

func (c *checker) duration(n *node, path string, limit time.Duration) *time.Duration {
	s, ok := c.str(n, path)
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		c.add(n.off, path, "invalid duration %q (want e.g. \"500ms\", \"15m\", \"1h30m\")", s)
	case d <= 0:
		c.add(n.off, path, "duration %q must be positive (remove the field for the default)", s)
	case d > limit:
		c.add(n.off, path, "duration %q is longer than %s", s, limit)
	default:
		return &d
	}
	return nil
}

// unknown reports an unknown field, suggesting the closest known one.
func (c *checker) unknown(m member, path string, known []string) {
	c.add(m.keyOff, path, "unknown field %q%s", m.key, suggest(m.key, known))
}

// suggest returns ` (did you mean "x"?)` for the known name closest to s,
// or "" when none is close.
func suggest(s string, known []string) string {
	if best := closest(s, known); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// didYouMean returns `, did you mean "x"?` for the known name closest to
// s, or "" when none is close.
func didYouMean(s string, known []string) string {
	if best := closest(s, known); best != "" {
		return fmt.Sprintf(", did you mean %q?", best)
	}
	return ""
}

// closest returns the known name closest to s (at most two edits away, or
// s abbreviates it), or "".
func closest(s string, known []string) string {
	best, bestD := "", 3
	low := strings.ToLower(s)
	for _, k := range known {
		d := editDistance(low, k)
		if len(low) >= 3 && strings.HasPrefix(k, low) {
			d = min(d, 2) // an abbreviation: "exec" for "execute"
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// checkID returns why id cannot name a provider, or "".
func checkID(id string) string {
	if id == "" || len(id) > maxIDLength {
		return fmt.Sprintf("provider id must be 1 to %d characters", maxIDLength)
	}
	if id == "acp" || id == "pty" {
		return fmt.Sprintf("%q is reserved for \"extends\"", id)
	}
	for i, c := range id {
		lower := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !lower && (i == 0 || c != '-' && c != '_' && c != '.') {
			return fmt.Sprintf("invalid provider id %q (want lowercase letters, digits, '-', '_' or '.', starting with a letter or digit)", id)
		}
	}
	return ""
}
