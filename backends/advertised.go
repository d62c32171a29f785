package backends

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Advertised is what an agent offers one of its sessions: session modes,
// session config options (model, reasoning level, ...) and slash commands,
// as last announced. It is transport-neutral; ACP fills it from the
// session/new answer and the current_mode_update, config_option_update and
// available_commands_update notifications.
type Advertised struct {
	// Modes are the session modes offered; CurrentMode is the one in force.
	Modes       []Mode `json:"modes"`
	CurrentMode string `json:"current_mode,omitempty"`
	// Options are the session config options, in the agent's order.
	Options []ConfigOption `json:"options"`
	// Commands are the slash commands, without their leading "/".
	Commands []Command `json:"commands"`
}

// ConfigOption is one session config option the agent offers.
type ConfigOption struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Category is the agent's hint for the kind of option ("model",
	// "mode", "thought_level" or one of its own); it may be empty.
	Category string `json:"category,omitempty"`
	// Type is "select" (one of Choices) or "boolean" ("true"/"false").
	Type string `json:"type"`
	// Current is the value in force (a choice's value, or "true"/"false").
	Current string `json:"current"`
	// Choices are the values of a select option.
	Choices []Choice `json:"choices,omitempty"`
}

// Config option types.
const (
	OptionSelect  = "select"
	OptionBoolean = "boolean"
)

// Choice is one value of a select option.
type Choice struct {
	Value       string `json:"value"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Group is the name of the group the agent put the value in, if any.
	Group string `json:"group,omitempty"`
}

// Command is one slash command the agent offers.
type Command struct {
	// Name is the command without its "/".
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Hint describes the input the command takes after its name; empty
	// when it takes none.
	Hint string `json:"hint,omitempty"`
}

// Allows reports whether v is a value the option accepts.
func (o ConfigOption) Allows(v string) bool {
	if o.Type == OptionBoolean {
		return v == "true" || v == "false"
	}
	return slices.ContainsFunc(o.Choices, func(c Choice) bool { return c.Value == v })
}

// Values lists the values the option accepts.
func (o ConfigOption) Values() []string {
	if o.Type == OptionBoolean {
		return []string{"true", "false"}
	}
	out := make([]string, len(o.Choices))
	for i, c := range o.Choices {
		out[i] = c.Value
	}
	return out
}

// HasMode reports whether the agent offers mode id.
func (a Advertised) HasMode(id string) bool {
	return slices.ContainsFunc(a.Modes, func(m Mode) bool { return m.ID == id })
}

// ModeIDs lists the ids of the modes offered.
func (a Advertised) ModeIDs() []string {
	out := make([]string, len(a.Modes))
	for i, m := range a.Modes {
		out[i] = m.ID
	}
	return out
}

// Option finds the option a user names by key: the option whose id is key,
// or else the only option whose category is key (so "model" finds an
// agent's model selector whatever its id).
func (a Advertised) Option(key string) (ConfigOption, bool) {
	for _, o := range a.Options {
		if o.ID == key {
			return o, true
		}
	}
	var found []ConfigOption
	for _, o := range a.Options {
		if o.Category != "" && o.Category == key {
			found = append(found, o)
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	return ConfigOption{}, false
}

// OptionIDs lists the ids of the options offered.
func (a Advertised) OptionIDs() []string {
	out := make([]string, len(a.Options))
	for i, o := range a.Options {
		out[i] = o.ID
	}
	return out
}

// AdvertisedFrom is what info says the agent offers. An option list or
// command list that cannot be read is left empty.
func AdvertisedFrom(info Info) Advertised {
	a := Advertised{Modes: slices.Clone(info.Modes), CurrentMode: info.CurrentMode}
	a.Options, _ = ParseConfigOptions(info.ConfigOptions)
	a.Commands, _ = ParseCommands(info.Commands)
	return a
}

// Apply updates a from a mode, config or commands event (the raw ACP
// update, or the pool's {"mode": id}), and reports whether it changed
// anything. Other events, and payloads it cannot read, change nothing.
func (a *Advertised) Apply(ev Event) bool {
	var u struct {
		CurrentModeID *string         `json:"currentModeId"`
		Mode          *string         `json:"mode"`
		ConfigOptions json.RawMessage `json:"configOptions"`
		Commands      json.RawMessage `json:"availableCommands"`
	}
	if json.Unmarshal(ev.Data, &u) != nil {
		return false
	}
	switch ev.Type {
	case EventMode:
		m := u.CurrentModeID
		if m == nil {
			m = u.Mode
		}
		if m == nil || *m == a.CurrentMode {
			return false
		}
		a.CurrentMode = *m
		return true
	case EventConfig:
		opts, err := ParseConfigOptions(u.ConfigOptions)
		if err != nil || u.ConfigOptions == nil {
			return false
		}
		a.Options = opts
		return true
	case EventCommands:
		cmds, err := ParseCommands(u.Commands)
		if err != nil || u.Commands == nil {
			return false
		}
		a.Commands = cmds
		return true
	}
	return false
}

// ParseConfigOptions reads ACP session config options (the configOptions
// of session/new, session/set_config_option and config_option_update).
// Options of a type it does not know are left out.
func ParseConfigOptions(raw json.RawMessage) ([]ConfigOption, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var in []struct {
		ID           string          `json:"id"`
		Name         string          `json:"name"`
		Description  string          `json:"description"`
		Category     string          `json:"category"`
		Type         string          `json:"type"`
		CurrentValue json.RawMessage `json:"currentValue"`
		Options      json.RawMessage `json:"options"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("config options: %w", err)
	}
	out := make([]ConfigOption, 0, len(in))
	for _, o := range in {
		c := ConfigOption{ID: o.ID, Name: o.Name, Description: o.Description, Category: o.Category, Type: o.Type}
		if c.Type == "" {
			c.Type = OptionSelect
		}
		switch c.Type {
		case OptionBoolean:
			var b bool
			if json.Unmarshal(o.CurrentValue, &b) != nil {
				continue
			}
			c.Current = strconv.FormatBool(b)
		case OptionSelect:
			if json.Unmarshal(o.CurrentValue, &c.Current) != nil {
				continue
			}
			choices, err := parseChoices(o.Options)
			if err != nil {
				return nil, fmt.Errorf("config option %q: %w", o.ID, err)
			}
			c.Choices = choices
		default:
			continue
		}
		if c.ID == "" {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// parseChoices reads a select's options: a flat list of {value, name} or a
// list of groups {group, name, options}.
func parseChoices(raw json.RawMessage) ([]Choice, error) {
	var items []struct {
		Value       *string  `json:"value"`
		Name        string   `json:"name"`
		Description string   `json:"description"`
		Options     []Choice `json:"options"`
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	var out []Choice
	for _, it := range items {
		if it.Value != nil {
			out = append(out, Choice{Value: *it.Value, Name: it.Name, Description: it.Description})
			continue
		}
		for _, c := range it.Options {
			c.Group = it.Name
			out = append(out, c)
		}
	}
	return out, nil
}

// ParseCommands reads ACP available commands (the availableCommands of an
// available_commands_update). A leading "/" of a name is dropped.
func ParseCommands(raw json.RawMessage) ([]Command, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var in []struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Input       *struct {
			Hint string `json:"hint"`
		} `json:"input"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("available commands: %w", err)
	}
	out := make([]Command, 0, len(in))
	for _, c := range in {
		name := strings.TrimPrefix(c.Name, "/")
		if name == "" {
			continue
		}
		cmd := Command{Name: name, Description: c.Description}
		if c.Input != nil {
			cmd.Hint = c.Input.Hint
		}
		out = append(out, cmd)
	}
	return out, nil
}
