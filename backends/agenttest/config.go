package agenttest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Command is a slash command the fake advertises.
type Command struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Hint, when set, makes the command take input described by it.
	Hint string `json:"hint,omitempty"`
}

// configState is the fake's session modes and config options, as set by
// session/set_mode and session/set_config_option. Guarded by agent.mu.
type configState struct {
	loaded bool
	mode   string
	// opts are the ConfigOptions of the script, decoded, with their
	// currentValue kept up to date.
	opts []map[string]any
}

// configLocked returns the state, made from the script on first use.
func (a *agent) configLocked() *configState {
	c := &a.config
	if c.loaded {
		return c
	}
	c.loaded = true
	if len(a.script.Modes) > 0 {
		c.mode = a.script.Modes[0].ID
	}
	if len(a.script.ConfigOptions) > 0 {
		if err := json.Unmarshal(a.script.ConfigOptions, &c.opts); err != nil {
			fmt.Fprintln(a.stderr, "fake agent: config options:", err)
		}
	}
	return c
}

// optionValues lists the values a select option of the script accepts.
func optionValues(o map[string]any) []string {
	var out []string
	items, _ := o["options"].([]any)
	for _, it := range items {
		m, _ := it.(map[string]any)
		if v, ok := m["value"].(string); ok {
			out = append(out, v)
			continue
		}
		group, _ := m["options"].([]any)
		for _, g := range group {
			gm, _ := g.(map[string]any)
			if v, ok := gm["value"].(string); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// setConfigOption answers session/set_config_option with the whole new
// option set, or -32602 for an unknown option or value.
func (a *agent) setConfigOption(m message) {
	var p struct {
		ConfigID string `json:"configId"`
		Value    any    `json:"value"`
	}
	_ = json.Unmarshal(m.Params, &p)
	a.mu.Lock()
	c := a.configLocked()
	i := slices.IndexFunc(c.opts, func(o map[string]any) bool { return o["id"] == p.ConfigID })
	if i < 0 {
		a.mu.Unlock()
		a.respondErr(m.ID, -32602, "Invalid params", map[string]any{"details": "unknown config option " + p.ConfigID})
		return
	}
	o := c.opts[i]
	ok := false
	if o["type"] == "boolean" {
		_, ok = p.Value.(bool)
	} else if v, isStr := p.Value.(string); isStr {
		ok = slices.Contains(optionValues(o), v)
	}
	if !ok {
		a.mu.Unlock()
		a.respondErr(m.ID, -32602, "Invalid params", map[string]any{"details": fmt.Sprintf("invalid value %v for %s", p.Value, p.ConfigID)})
		return
	}
	o["currentValue"] = p.Value
	opts := slices.Clone(c.opts)
	a.mu.Unlock()
	a.respond(m.ID, map[string]any{"configOptions": opts})
}

// setMode answers session/set_mode after announcing the new mode, or
// -32602 for a mode the script does not offer.
func (a *agent) setMode(m message) {
	var p struct {
		ModeID string `json:"modeId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	if len(a.script.Modes) > 0 && !slices.ContainsFunc(a.script.Modes, func(md Mode) bool { return md.ID == p.ModeID }) {
		a.respondErr(m.ID, -32602, "Invalid params", map[string]any{"details": "unknown mode " + p.ModeID})
		return
	}
	a.mu.Lock()
	a.configLocked().mode = p.ModeID
	a.mu.Unlock()
	a.update(map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": p.ModeID})
	a.respond(m.ID, map[string]any{})
}

// announceCommands sends the script's commands as an
// available_commands_update, as agents do once a session exists.
func (a *agent) announceCommands() {
	if len(a.script.Commands) == 0 {
		return
	}
	cmds := make([]any, 0, len(a.script.Commands))
	for _, c := range a.script.Commands {
		cmd := map[string]any{"name": c.Name, "description": c.Description}
		if c.Hint != "" {
			cmd["input"] = map[string]any{"hint": c.Hint}
		}
		cmds = append(cmds, cmd)
	}
	a.update(map[string]any{"sessionUpdate": "available_commands_update", "availableCommands": cmds})
}

// expandConfig replaces "{{mode}}" with the current mode and
// "{{config:ID}}" with the current value of option ID.
func (a *agent) expandConfig(s string) string {
	if !strings.Contains(s, "{{mode}}") && !strings.Contains(s, "{{config:") {
		return s
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.configLocked()
	s = strings.ReplaceAll(s, "{{mode}}", c.mode)
	for _, o := range c.opts {
		id, _ := o["id"].(string)
		s = strings.ReplaceAll(s, "{{config:"+id+"}}", fmt.Sprint(o["currentValue"]))
	}
	return s
}
