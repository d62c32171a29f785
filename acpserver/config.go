package acpserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	acp "github.com/coder/acp-go-sdk"
)

// AgentOption is the id of the config option that chooses the session's
// agent. The underlying agent's options keep their own ids, but one whose
// id is AgentOption is shown as AgentOption+"."+its id.
const AgentOption = "agent"

// agentChoices are the providers the Agent option offers: the enabled,
// ready ACP providers (a terminal provider has no ACP updates to pass
// on), and current whatever its state, so that the current value is one
// of the choices.
func agentChoices(snap registry.Snapshot, current string) []acp.SessionConfigSelectOption {
	var out []acp.SessionConfigSelectOption
	seen := false
	for _, p := range snap.Providers {
		if p.Kind != backends.KindACP || !p.Enabled || !usable(p.Status) {
			if p.ID != current {
				continue
			}
		}
		seen = seen || p.ID == current
		o := acp.SessionConfigSelectOption{Value: acp.SessionConfigValueId(p.ID), Name: p.Label}
		if o.Name == "" {
			o.Name = p.ID
		}
		if p.Description != "" {
			o.Description = acp.Ptr(p.Description)
		}
		out = append(out, o)
	}
	if !seen {
		out = append(out, acp.SessionConfigSelectOption{Value: acp.SessionConfigValueId(current), Name: current})
	}
	return out
}

// usable reports whether a provider of status st can start: ready, or
// installed and being probed.
func usable(st string) bool {
	return st == registry.StatusReady || st == registry.StatusProbing
}

// checkAgent returns an error a person can act on when agent cannot be
// the session's agent.
func checkAgent(snap registry.Snapshot, agent string) error {
	p, ok := snap.Provider(agent)
	switch {
	case !ok:
		return invalid(fmt.Sprintf("there is no agent %q: see agentpool providers for the agents you can choose", agent))
	case p.Kind != backends.KindACP:
		return invalid(fmt.Sprintf("agent %q is a terminal program: an editor can only use ACP agents", agent))
	case !p.Enabled:
		return invalid(fmt.Sprintf("agent %q is disabled: enable it with agentpool providers enable %s", agent, agent))
	case !usable(p.Status):
		msg := fmt.Sprintf("agent %q is not ready (%s)", agent, p.Status)
		if p.Diagnostic != "" {
			msg += ": " + p.Diagnostic
		}
		return invalid(msg)
	}
	return nil
}

// buildOptions is the session's config options: Agent first, then the
// underlying agent's own.
func buildOptions(snap registry.Snapshot, agent string, cfg pool.AgentConfig) []acp.SessionConfigOption {
	desc := "The coding agent that answers the next prompt; the previous one stays warm."
	opts := []acp.SessionConfigOption{{Select: &acp.SessionConfigOptionSelect{
		Id: AgentOption, Name: "Agent", Description: &desc, Type: "select",
		CurrentValue: acp.SessionConfigValueId(agent),
		Options:      acp.SessionConfigSelectOptions{Ungrouped: acp.Ptr(acp.SessionConfigSelectOptionsUngrouped(agentChoices(snap, agent)))},
	}}}
	for _, o := range cfg.Options {
		opts = append(opts, passOption(o))
	}
	return opts
}

// optionID is the id the editor sees for an underlying agent's option.
func optionID(id string) string {
	if id == AgentOption {
		return AgentOption + "." + id
	}
	return id
}

// underlyingID is the agent's own id of an option the editor names.
func underlyingID(id string) string {
	return strings.TrimPrefix(id, AgentOption+".")
}

// passOption converts one of the agent's options to ACP.
func passOption(o backends.ConfigOption) acp.SessionConfigOption {
	var cat *acp.SessionConfigOptionCategory
	if o.Category != "" {
		cat = acp.Ptr(acp.SessionConfigOptionCategory(o.Category))
	}
	var desc *string
	if o.Description != "" {
		desc = acp.Ptr(o.Description)
	}
	id := acp.SessionConfigId(optionID(o.ID))
	if o.Type == backends.OptionBoolean {
		v, _ := strconv.ParseBool(o.Current)
		return acp.SessionConfigOption{Boolean: &acp.SessionConfigOptionBoolean{Id: id, Name: o.Name, Description: desc,
			Category: cat, CurrentValue: v, Type: "boolean"}}
	}
	sel := &acp.SessionConfigOptionSelect{Id: id, Name: o.Name, Description: desc, Category: cat, Type: "select",
		CurrentValue: acp.SessionConfigValueId(o.Current)}
	grouped := false
	for _, c := range o.Choices {
		grouped = grouped || c.Group != ""
	}
	choice := func(c backends.Choice) acp.SessionConfigSelectOption {
		out := acp.SessionConfigSelectOption{Value: acp.SessionConfigValueId(c.Value), Name: c.Name}
		if c.Description != "" {
			out.Description = acp.Ptr(c.Description)
		}
		return out
	}
	if grouped {
		var groups acp.SessionConfigSelectOptionsGrouped
		at := map[string]int{}
		for _, c := range o.Choices {
			i, ok := at[c.Group]
			if !ok {
				i = len(groups)
				at[c.Group] = i
				groups = append(groups, acp.SessionConfigSelectGroup{Group: acp.SessionConfigGroupId(c.Group), Name: c.Group})
			}
			groups[i].Options = append(groups[i].Options, choice(c))
		}
		sel.Options.Grouped = &groups
	} else {
		list := make(acp.SessionConfigSelectOptionsUngrouped, 0, len(o.Choices))
		for _, c := range o.Choices {
			list = append(list, choice(c))
		}
		sel.Options.Ungrouped = &list
	}
	return acp.SessionConfigOption{Select: sel}
}

// buildModes is the agent's modes, nil when it offers none.
func buildModes(cfg pool.AgentConfig) *acp.SessionModeState {
	if len(cfg.Modes.Available) == 0 {
		return nil
	}
	st := &acp.SessionModeState{CurrentModeId: acp.SessionModeId(cfg.Modes.Current)}
	for _, m := range cfg.Modes.Available {
		mode := acp.SessionMode{Id: acp.SessionModeId(m.ID), Name: m.Name}
		if m.Description != "" {
			mode.Description = acp.Ptr(m.Description)
		}
		st.AvailableModes = append(st.AvailableModes, mode)
	}
	if st.CurrentModeId == "" {
		st.CurrentModeId = st.AvailableModes[0].Id
	}
	return st
}

// optionsOf returns the session's config options and modes as they are
// now. An agent that never ran in the session has told nothing yet: only
// Agent is offered until it starts.
func (s *Server) optionsOf(ctx context.Context, api API, ss *session, snap registry.Snapshot) ([]acp.SessionConfigOption, *acp.SessionModeState) {
	agent := ss.currentAgent()
	cfg, err := api.AgentConfig(ctx, ss.id, agent)
	if err != nil {
		s.logger.Debug("agent config", "session", ss.id, "agent", agent, "err", err)
	}
	return buildOptions(snap, agent, cfg), buildModes(cfg)
}

// announceAgent sends what the session's agent offers as it is now: its
// config options (with Agent), its current mode and its commands (with
// the pool's), read in one call.
func (s *Server) announceAgent(ctx context.Context, ss *session) {
	api, err := s.cfg.Connect(ctx)
	if err != nil {
		return
	}
	provs := s.providersAsync(ctx, api)
	agent := ss.currentAgent()
	cfg, err := api.AgentConfig(ctx, ss.id, agent)
	if err != nil {
		s.logger.Debug("agent config", "session", ss.id, "agent", agent, "err", err)
	}
	s.update(ss.id, acp.SessionUpdate{ConfigOptionUpdate: &acp.SessionConfigOptionUpdate{ConfigOptions: buildOptions(<-provs, agent, cfg)}})
	if modes := buildModes(cfg); modes != nil {
		s.update(ss.id, acp.SessionUpdate{CurrentModeUpdate: &acp.SessionCurrentModeUpdate{CurrentModeId: modes.CurrentModeId}})
	}
	s.announceCommands(ctx, ss, agentCommands(cfg))
}

// announceOptions sends the session's config options as they are now.
func (s *Server) announceOptions(ctx context.Context, ss *session) {
	api, err := s.cfg.Connect(ctx)
	if err != nil {
		return
	}
	snap, err := api.Providers(ctx)
	if err != nil {
		s.logger.Warn("read providers", "err", err)
	}
	opts, _ := s.optionsOf(ctx, api, ss, snap)
	s.update(ss.id, acp.SessionUpdate{ConfigOptionUpdate: &acp.SessionConfigOptionUpdate{ConfigOptions: opts}})
}

// announceCommands sends the slash commands: the agent's (cmds, or as the
// pool last heard them when nil) and the pool's own, which win a name
// both have.
func (s *Server) announceCommands(ctx context.Context, ss *session, cmds []acp.AvailableCommand) {
	if cmds == nil {
		if api, err := s.cfg.Connect(ctx); err == nil {
			if cfg, err := api.AgentConfig(ctx, ss.id, ss.currentAgent()); err == nil {
				cmds = agentCommands(cfg)
			}
		}
	}
	out := make([]acp.AvailableCommand, 0, len(cmds)+len(s.cfg.Commands))
	for _, c := range s.cfg.Commands {
		ac := acp.AvailableCommand{Name: c.Name, Description: c.Description + " (agentpool)"}
		if c.Hint != "" {
			ac.Input = &acp.AvailableCommandInput{Unstructured: &acp.UnstructuredCommandInput{Hint: c.Hint}}
		}
		out = append(out, ac)
	}
	for _, c := range cmds {
		if s.command(c.Name) == nil {
			out = append(out, c)
		}
	}
	s.update(ss.id, acp.SessionUpdate{AvailableCommandsUpdate: &acp.SessionAvailableCommandsUpdate{AvailableCommands: out}})
}

// agentCommands are the slash commands of an agent's config, never nil.
func agentCommands(cfg pool.AgentConfig) []acp.AvailableCommand {
	out := []acp.AvailableCommand{}
	for _, c := range cfg.Commands {
		ac := acp.AvailableCommand{Name: c.Name, Description: c.Description}
		if c.Hint != "" {
			ac.Input = &acp.AvailableCommandInput{Unstructured: &acp.UnstructuredCommandInput{Hint: c.Hint}}
		}
		out = append(out, ac)
	}
	return out
}

// SetSessionConfigOption switches the session's agent (option "agent":
// the next prompt goes to that agent, the previous one stays warm) or
// sets one of the underlying agent's own options.
func (s *Server) SetSessionConfigOption(ctx context.Context, p acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	var sid acp.SessionId
	var id, value string
	switch {
	case p.ValueId != nil:
		sid, id, value = p.ValueId.SessionId, string(p.ValueId.ConfigId), string(p.ValueId.Value)
	case p.Boolean != nil:
		sid, id, value = p.Boolean.SessionId, string(p.Boolean.ConfigId), strconv.FormatBool(p.Boolean.Value)
	default:
		return acp.SetSessionConfigOptionResponse{}, invalid("set_config_option needs a configId and a value")
	}
	ss, err := s.sessionOf(sid)
	if err != nil {
		return acp.SetSessionConfigOptionResponse{}, err
	}
	api, err := s.api(ctx)
	if err != nil {
		return acp.SetSessionConfigOptionResponse{}, err
	}
	snap, err := api.Providers(ctx)
	if err != nil {
		return acp.SetSessionConfigOptionResponse{}, reqErr(fmt.Errorf("read the agents: %w", err))
	}
	if id == AgentOption {
		if err := checkAgent(snap, value); err != nil {
			return acp.SetSessionConfigOptionResponse{}, err
		}
		ss.mu.Lock()
		changed := ss.agent != value
		ss.agent = value
		ss.mu.Unlock()
		opts, modes := s.optionsOf(ctx, api, ss, snap)
		if changed {
			s.logger.Info("agent switched", "session", ss.id, "agent", value)
			s.goOwned(func() {
				if modes != nil {
					s.update(ss.id, acp.SessionUpdate{CurrentModeUpdate: &acp.SessionCurrentModeUpdate{CurrentModeId: modes.CurrentModeId}})
				}
				s.announceCommands(s.ctx, ss, nil)
			})
		}
		return acp.SetSessionConfigOptionResponse{ConfigOptions: opts}, nil
	}
	agent := ss.currentAgent()
	// Only an option the session offers: an id the editor made up is
	// named as unknown, whether or not the agent has told its own yet.
	cfg, err := api.AgentConfig(ctx, ss.id, agent)
	if err != nil {
		return acp.SetSessionConfigOptionResponse{}, reqErr(err)
	}
	if !offers(cfg, underlyingID(id)) {
		ids := []string{AgentOption}
		for _, o := range cfg.Options {
			ids = append(ids, optionID(o.ID))
		}
		return acp.SetSessionConfigOptionResponse{}, invalid(fmt.Sprintf("unknown option %q: this session offers %s", id, strings.Join(ids, ", ")))
	}
	res, err := api.SetAgentConfig(ctx, ss.id, agent, pool.ConfigChange{Options: map[string]string{underlyingID(id): value}})
	if err != nil {
		return acp.SetSessionConfigOptionResponse{}, reqErr(err)
	}
	return acp.SetSessionConfigOptionResponse{ConfigOptions: buildOptions(snap, agent, res.AgentConfig)}, nil
}

// SetSessionMode sets the underlying agent's mode.
func (s *Server) SetSessionMode(ctx context.Context, p acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	ss, err := s.sessionOf(p.SessionId)
	if err != nil {
		return acp.SetSessionModeResponse{}, err
	}
	api, err := s.api(ctx)
	if err != nil {
		return acp.SetSessionModeResponse{}, err
	}
	if _, err := api.SetAgentConfig(ctx, ss.id, ss.currentAgent(), pool.ConfigChange{Mode: string(p.ModeId)}); err != nil {
		return acp.SetSessionModeResponse{}, reqErr(err)
	}
	return acp.SetSessionModeResponse{}, nil
}

// offers reports whether the agent's config has the option id.
func offers(cfg pool.AgentConfig, id string) bool {
	for _, o := range cfg.Options {
		if o.ID == id {
			return true
		}
	}
	return false
}
