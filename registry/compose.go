package registry

import (
	"maps"
	"strings"

	"github.com/agentpool/agentpool/backends"
)

// parseDocument parses and validates a whole providers document and merges
// it over the built-ins. A document with any problem is rejected whole: the
// error joins one *ValidationError per problem.
func parseDocument(file string, data []byte, base []*definition) (map[string]*definition, error) {
	defs, _, err := parseSettings(file, data, base)
	return defs, err
}

// settings are the document's own fields, beside its providers.
type settings struct {
	// defaultAgent is "default_agent": the agent of a session created
	// without one ("" = the daemon's default).
	defaultAgent string
}

// parseSettings is parseDocument that also returns the document's own
// settings.
func parseSettings(file string, data []byte, base []*definition) (map[string]*definition, settings, error) {
	c := &checker{file: file, data: data}
	if len(data) > maxFileSize {
		c.add(0, "", "file is larger than %d bytes", maxFileSize)
		return nil, settings{}, c.err()
	}
	root, perr := parseTree(data)
	if perr != nil {
		c.add(perr.off, perr.path, "%s", perr.msg)
		return nil, settings{}, c.err()
	}
	doc := decodeDocument(c, root)
	defs := compose(c, doc, base)
	daemonMCPServers(defs, doc.mcpServers) // mcp.go
	var set settings
	if doc.defaultAgent != nil {
		id := *doc.defaultAgent
		switch d, ok := defs[id]; {
		case !ok:
			c.add(doc.defaultAgentOff, "default_agent", "names no provider: %q is neither built in nor under \"providers\"", id)
		case d.kind != backends.KindACP && d.kind != backends.KindPTY:
			c.add(doc.defaultAgentOff, "default_agent", "%q cannot run a session", id)
		default:
			set.defaultAgent = id
		}
	}
	if err := c.err(); err != nil {
		return nil, settings{}, err
	}
	return defs, set, nil
}

// compose merges the entries of doc over the built-ins: an entry with a
// built-in id overrides its fields, an entry with "extends" defines a new
// provider from "acp", "pty" or another provider (after that provider's own
// overrides). Maps (env, permissions, config, mcp_servers) merge key by key (a
// server replacing the inherited one of its name); "sandbox" merges
// field by field, each field it sets (lists included) replacing the
// inherited one; every other field replaces (pass_env too: a built-in's
// list is replaced, not added to). A new provider is enabled
// unless it says otherwise and does not inherit its base's label,
// description or enabled flag; one extending "acp" or "pty" starts from
// the default sandbox.
func compose(c *checker, doc *document, base []*definition) map[string]*definition {
	defs := make(map[string]*definition, len(base)+len(doc.entries))
	for _, d := range base {
		defs[d.id] = d.clone()
	}
	custom := make(map[string]*entry)
	var order []string
	for _, e := range doc.entries {
		path := joinPath("providers", e.id)
		if d, ok := defs[e.id]; ok {
			if n := e.at["extends"]; n != nil {
				c.add(n.off, joinPath(path, "extends"),
					"%q is built in: override its fields directly; extends is only for new providers", e.id)
				continue
			}
			d.inFile = true
			c.apply(d, e, path)
			continue
		}
		custom[e.id] = e
		order = append(order, e.id)
	}

	const (
		visiting = 1
		done     = 2
	)
	state := make(map[string]int)
	var resolve func(id string, chain []string) *definition
	resolve = func(id string, chain []string) *definition {
		if state[id] == done {
			return defs[id]
		}
		e := custom[id]
		path := joinPath("providers", id)
		state[id] = visiting
		defer func() { state[id] = done }()
		if e.extends == nil {
			if e.at["extends"] == nil {
				c.add(e.keyOff, path,
					"new provider %q needs \"extends\": \"acp\", \"pty\" or the id of another provider", id)
			}
			return nil
		}
		ext, extAt := *e.extends, e.at["extends"]
		var parent *definition
		switch {
		case ext == string(backends.KindACP) || ext == string(backends.KindPTY):
			if e.command == nil {
				c.add(e.keyOff, path, "a new provider extending %q needs \"command\"", ext)
				return nil
			}
			parent = &definition{kind: backends.Kind(ext), sandbox: defaultSandbox()}
		case custom[ext] != nil:
			if state[ext] == visiting {
				c.add(extAt.off, joinPath(path, "extends"), "extends cycle: %s → %s",
					strings.Join(append(chain, id), " → "), ext)
				return nil
			}
			parent = resolve(ext, append(chain, id))
			if parent == nil {
				return nil // the parent's own problem is already reported
			}
		case defs[ext] != nil:
			parent = defs[ext]
		default:
			c.add(extAt.off, joinPath(path, "extends"),
				"no provider %q to extend (want \"acp\", \"pty\" or a provider id)%s", ext, suggest(ext, knownIDs(defs, custom)))
			return nil
		}
		d := parent.clone()
		d.id, d.label, d.description = id, id, ""
		d.builtIn, d.inFile, d.enabled = false, true, true
		c.apply(d, e, path)
		defs[id] = d
		return d
	}
	for _, id := range order {
		resolve(id, nil)
	}
	return defs
}

func knownIDs(defs map[string]*definition, custom map[string]*entry) []string {
	ids := []string{string(backends.KindACP), string(backends.KindPTY)}
	for id := range defs {
		ids = append(ids, id)
	}
	for id := range custom {
		ids = append(ids, id)
	}
	return ids
}

// apply sets the fields e sets on d, checking that fields specific to one
// kind of provider are not used on the other.
func (c *checker) apply(d *definition, e *entry, path string) {
	only := func(field string, kind backends.Kind) bool {
		n := e.at[field]
		if n == nil {
			return false
		}
		if d.kind != kind {
			c.add(n.off, joinPath(path, field), "only for %s providers (%q is %s)", kind, e.id, d.kind)
			return false
		}
		return true
	}
	if e.enabled != nil {
		d.enabled = *e.enabled
	}
	if e.label != nil {
		d.label = *e.label
	}
	if e.description != nil {
		d.description = *e.description
	}
	if e.command != nil {
		d.command = e.command
	}
	if e.passEnv != nil {
		d.passEnv = e.passEnv
	}
	if e.env != nil {
		if d.env == nil {
			d.env = make(map[string]string, len(e.env))
		}
		maps.Copy(d.env, e.env)
	}
	if e.permissions != nil {
		if d.permissions == nil {
			d.permissions = make(map[string]string, len(e.permissions))
		}
		maps.Copy(d.permissions, e.permissions)
	}
	if e.mode != nil {
		d.mode = *e.mode
	}
	if only("config", backends.KindACP) && e.config != nil {
		if d.config == nil {
			d.config = make(map[string]string, len(e.config))
		}
		maps.Copy(d.config, e.config)
	}
	if e.idleTimeout != nil {
		d.idleTimeout = *e.idleTimeout
	}
	if e.budget != nil {
		d.budget = *e.budget
	}
	if e.spares != nil {
		d.spares = *e.spares
	}
	if e.handoff != nil {
		d.handoff = *e.handoff
	}
	if e.handoffBytes != nil {
		d.handoffBytes = *e.handoffBytes
	}
	if e.turnTimeout != nil {
		d.turnTimeout = *e.turnTimeout
	}
	if only("compat", backends.KindACP) && e.missingFileEmpty != nil {
		d.compat.MissingFileEmpty = *e.missingFileEmpty
	}
	if only("compat", backends.KindACP) && e.noCancelRequest != nil {
		d.compat.NoCancelRequest = *e.noCancelRequest
	}
	if only("ready_pattern", backends.KindPTY) && e.readyPattern != nil {
		d.pty.ReadyPattern = *e.readyPattern
	}
	if only("busy_pattern", backends.KindPTY) && e.busyPattern != nil {
		d.pty.BusyPattern = *e.busyPattern
	}
	if only("quiet_window", backends.KindPTY) && e.quietWindow != nil {
		d.pty.QuietWindow = *e.quietWindow
	}
	if only("cols", backends.KindPTY) && e.cols != nil {
		d.pty.Cols = *e.cols
	}
	if only("rows", backends.KindPTY) && e.rows != nil {
		d.pty.Rows = *e.rows
	}
	if only("cancel_keys", backends.KindPTY) && e.cancelKeys != nil {
		d.pty.CancelKeys = *e.cancelKeys
	}
	if only("clear_keys", backends.KindPTY) && e.clearKeys != nil {
		d.pty.ClearKeys = *e.clearKeys
	}
	if only("cancel_min_interval", backends.KindPTY) && e.cancelMin != nil {
		d.pty.CancelMinInterval = *e.cancelMin
	}
	if only("ignore_patterns", backends.KindPTY) && e.ignorePatterns != nil {
		d.pty.IgnorePatterns = e.ignorePatterns
	}
	if only("resume_args", backends.KindPTY) && e.resumeArgs != nil {
		d.pty.ResumeArgs = e.resumeArgs
	}
	if only("mcp_servers", backends.KindACP) && e.mcpServers != nil {
		d.mcpServers = d.mcpServers.Merge(e.mcpServers)
	}
	applySandbox(d, e.sandbox)
}
