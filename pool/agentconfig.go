package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/agentpool/agentpool/backends"
)

// ErrNotAdvertised is returned (wrapped) when a session's agent is asked
// to change a mode or config option before it ever advertised what it
// offers (it has not started in the session yet), so the choice cannot be
// checked.
var ErrNotAdvertised = errors.New("the agent has not advertised its modes and options yet")

// ModeKey is the key of a provider's "config" defaults that names the
// session mode rather than a config option.
const ModeKey = "mode"

// AgentConfig is what an agent of a session advertises (its session modes,
// config options and slash commands, as last announced) and what the
// session chose for it.
type AgentConfig struct {
	Session string `json:"session"`
	Agent   string `json:"agent"`
	// Running is true when the agent runs, so that a change applies at once.
	Running bool `json:"running"`
	// Known is false until the agent has started once in the session:
	// then nothing is known of what it offers.
	Known    bool                    `json:"known"`
	Modes    ModeState               `json:"modes"`
	Options  []backends.ConfigOption `json:"options"`
	Commands []backends.Command      `json:"commands"`
	// Chosen is what the session set through the pool; it is re-applied
	// each time the agent starts.
	Chosen Chosen `json:"chosen"`
}

// ModeState is the session modes an agent offers and the one in force.
type ModeState struct {
	Available []backends.Mode `json:"available"`
	Current   string          `json:"current,omitempty"`
}

// Chosen is a session's own choice of mode and config option values
// (option id to value) for one agent.
type Chosen struct {
	Mode    string            `json:"mode,omitempty"`
	Options map[string]string `json:"options,omitempty"`
}

// ConfigChange asks to set an agent's mode and config options. Options
// are keyed by option id or category ("model"); empty fields change
// nothing.
type ConfigChange struct {
	Mode    string            `json:"mode,omitempty"`
	Options map[string]string `json:"options,omitempty"`
}

// ConfigResult is an AgentConfig after a change, and how it was applied.
type ConfigResult struct {
	AgentConfig
	// Applied is true when the running agent took the change; false when
	// it does not run and the change is stored for its next start.
	Applied bool `json:"applied"`
	// Note says, in a sentence, what happened.
	Note string `json:"note"`
}

// advertisedState is what a running agent advertises, kept up to date
// from its mode, config and commands events and written through to the
// store, so that it can be read (and choices checked) when the agent no
// longer runs. mu serialises each update with its store write.
type advertisedState struct {
	mu    sync.Mutex
	known bool
	adv   backends.Advertised
}

// initAdvertised takes what b advertises once it has started, before the
// entry is ready for use; storeAdvertised writes it once the agent's row
// exists.
func (p *Pool) initAdvertised(e *entry, b backends.Backend) {
	st := &e.adv
	st.mu.Lock()
	defer st.mu.Unlock()
	st.adv, st.known = backends.AdvertisedFrom(b.Info()), true
}

// storeAdvertised writes what e's agent advertises to the store.
func (p *Pool) storeAdvertised(e *entry) {
	if e.sess.isSpare() {
		return // stored at adoption (see spares.go)
	}
	st := &e.adv
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.known {
		p.storeAdvertisedLocked(e, st.adv)
	}
}

// noteAdvertised updates what e's agent advertises from one of its
// events. Events before initAdvertised are left to it: the backend's Info
// it reads already holds them.
func (p *Pool) noteAdvertised(e *entry, ev backends.Event) {
	switch ev.Type {
	case backends.EventMode, backends.EventConfig, backends.EventCommands:
	default:
		return
	}
	st := &e.adv
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.known && st.adv.Apply(ev) {
		p.storeAdvertisedLocked(e, st.adv)
	}
}

// refreshAdvertised re-reads what b advertises after the pool changed its
// mode or options.
func (p *Pool) refreshAdvertised(e *entry, b backends.Backend) {
	st := &e.adv
	st.mu.Lock()
	defer st.mu.Unlock()
	st.adv, st.known = backends.AdvertisedFrom(b.Info()), true
	p.storeAdvertisedLocked(e, st.adv)
}

// storeAdvertisedLocked writes adv, e.adv.mu held. A missing row (an
// update before the agent's first start is recorded) is left to
// storeAdvertised, which runs once it is.
func (p *Pool) storeAdvertisedLocked(e *entry, adv backends.Advertised) {
	err := p.cfg.Store.SetAgentAdvertised(context.WithoutCancel(p.ctx), e.key.session, e.key.agent, adv)
	switch {
	case errors.Is(err, ErrNotFound):
		p.logger.Debug("what the agent advertises is stored once its row is", "session", e.key.session, "agent", e.key.agent)
	case err != nil:
		p.logger.Warn("store what the agent advertises", "session", e.key.session, "agent", e.key.agent, "err", err)
	}
}

// AgentConfig returns what agent ("" for the session's active agent)
// advertises in session id and what the session chose for it. It reads
// the running agent, or what the store kept from its last run.
func (p *Pool) AgentConfig(ctx context.Context, id, agent string) (AgentConfig, error) {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return AgentConfig{}, err
	}
	agent = p.agentOr(s, agent)
	return p.agentConfig(ctx, s, agent)
}

func (p *Pool) agentOr(s *session, agent string) string {
	if agent != "" {
		return agent
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.ActiveAgent
}

func (p *Pool) agentConfig(ctx context.Context, s *session, agent string) (AgentConfig, error) {
	c := AgentConfig{Session: s.id, Agent: agent, Modes: ModeState{Available: []backends.Mode{}},
		Options: []backends.ConfigOption{}, Commands: []backends.Command{}}
	rec, err := p.cfg.Store.GetAgent(ctx, s.id, agent)
	switch {
	case errors.Is(err, ErrNotFound):
		if _, rerr := p.cfg.Resolver.Resolve(agent); rerr != nil {
			return AgentConfig{}, fmt.Errorf("agent %q of session %q: %w", agent, s.id, rerr)
		}
		return c, nil
	case err != nil:
		return AgentConfig{}, err
	}
	c.Chosen = Chosen{Mode: rec.Mode, Options: maps.Clone(rec.ConfigOptions)}
	adv, known, running := p.liveAdvertised(s.id, agent)
	if !known {
		adv, known, err = p.cfg.Store.AgentAdvertised(ctx, s.id, agent)
		if err != nil {
			return AgentConfig{}, err
		}
	}
	c.Running, c.Known = running, known
	c.Modes.Current = adv.CurrentMode
	if adv.Modes != nil {
		c.Modes.Available = adv.Modes
	}
	if adv.Options != nil {
		c.Options = adv.Options
	}
	if adv.Commands != nil {
		c.Commands = adv.Commands
	}
	return c, nil
}

// liveAdvertised is what the running agent of (session, agent) advertises.
func (p *Pool) liveAdvertised(session, agent string) (adv backends.Advertised, known, running bool) {
	p.mu.Lock()
	e := p.entries[key{session, agent}]
	running = e != nil && e.state == StateIdle && e.backend != nil
	p.mu.Unlock()
	if e == nil {
		return backends.Advertised{}, false, false
	}
	e.adv.mu.Lock()
	defer e.adv.mu.Unlock()
	if !e.adv.known {
		return backends.Advertised{}, false, running
	}
	a := e.adv.adv
	a.Modes, a.Options, a.Commands = slices.Clone(a.Modes), slices.Clone(a.Options), slices.Clone(a.Commands)
	return a, true, running
}

// SetAgentConfig sets the mode and config options of agent ("" for the
// active agent) in session id, checked against what the agent advertised:
// an unknown mode, option or value is ErrInvalid naming it and the valid
// ones. A running agent takes the change at once (during a turn too: ACP
// lets a client switch at any time); one that does not run gets it at its
// next start. Either way the choice is stored and re-applied after every
// restart. An agent that never started in the session is
// ErrNotAdvertised.
func (p *Pool) SetAgentConfig(ctx context.Context, id, agent string, ch ConfigChange) (ConfigResult, error) {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return ConfigResult{}, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ConfigResult{}, fmt.Errorf("session %q: %w", id, ErrClosed)
	}
	agent = p.agentOr(s, agent)
	if ch.Mode == "" && len(ch.Options) == 0 {
		return ConfigResult{}, fmt.Errorf("%w: nothing to set (give a mode or options)", ErrInvalid)
	}
	e, err := p.settledEntry(ctx, id, agent)
	if err != nil {
		return ConfigResult{}, err
	}
	cur, err := p.agentConfig(ctx, s, agent)
	if err != nil {
		return ConfigResult{}, err
	}
	if !cur.Known {
		return ConfigResult{}, fmt.Errorf("agent %q of session %q: %w; start it (a prompt, or warm it) and try again", agent, id, ErrNotAdvertised)
	}
	adv := backends.Advertised{Modes: cur.Modes.Available, CurrentMode: cur.Modes.Current, Options: cur.Options}
	mode, opts, err := resolveChange(adv, ch)
	if err != nil {
		return ConfigResult{}, err
	}
	var b backends.Backend
	if e != nil {
		p.mu.Lock()
		if e.state == StateIdle {
			b = e.backend
		}
		p.mu.Unlock()
	}
	if b != nil {
		if err := p.applyConfig(ctx, s, agent, b, mode, opts); err != nil {
			return ConfigResult{}, err
		}
		p.refreshAdvertised(e, b)
	}
	if err := p.storeChoice(ctx, id, agent, mode, opts); err != nil {
		return ConfigResult{}, err
	}
	c, err := p.agentConfig(ctx, s, agent)
	if err != nil {
		return ConfigResult{}, err
	}
	r := ConfigResult{AgentConfig: c, Applied: b != nil}
	if r.Applied {
		r.Note = "applied to the running agent; re-applied whenever it restarts"
	} else {
		r.Note = "the agent is not running: stored, and applied when it next starts"
	}
	return r, nil
}

// settledEntry returns the entry of (id, agent), once it is no longer
// starting; nil when there is none.
func (p *Pool) settledEntry(ctx context.Context, id, agent string) (*entry, error) {
	p.mu.Lock()
	e := p.entries[key{id, agent}]
	var started chan struct{}
	if e != nil && e.state == StateStarting {
		started = e.started
	}
	p.mu.Unlock()
	if started != nil {
		select {
		case <-started:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for agent %q to start: %w", agent, ctx.Err())
		}
	}
	return e, nil
}

// resolveChange checks ch against adv and returns its mode and its
// options keyed by option id. An agent that offers no session modes but a
// config option of category "mode" (the protocol's newer form) has ch's
// mode set through that option.
func resolveChange(adv backends.Advertised, ch ConfigChange) (string, map[string]string, error) {
	if _, ok := adv.Option(ModeKey); ok && ch.Mode != "" && len(adv.Modes) == 0 {
		opts := maps.Clone(ch.Options)
		if opts == nil {
			opts = map[string]string{}
		}
		opts[ModeKey] = ch.Mode
		ch = ConfigChange{Options: opts}
	}
	if ch.Mode != "" && !adv.HasMode(ch.Mode) {
		return "", nil, fmt.Errorf("%w: unknown mode %q (%s)", ErrInvalid, ch.Mode, offered("modes", adv.ModeIDs()))
	}
	out := make(map[string]string, len(ch.Options))
	for _, k := range slices.Sorted(maps.Keys(ch.Options)) {
		v := ch.Options[k]
		o, ok := adv.Option(k)
		if !ok {
			return "", nil, fmt.Errorf("%w: unknown option %q (%s)", ErrInvalid, k, offered("options", adv.OptionIDs()))
		}
		if !o.Allows(v) {
			return "", nil, fmt.Errorf("%w: option %q has no value %q (%s)", ErrInvalid, o.ID, v, offered("values", o.Values()))
		}
		out[o.ID] = v
	}
	return ch.Mode, out, nil
}

func hasOption(adv backends.Advertised, key string) bool {
	_, ok := adv.Option(key)
	return ok
}

// offered names what the agent offers, for an error message.
func offered(what string, ids []string) string {
	if len(ids) == 0 {
		return "the agent offers no " + what
	}
	return "the agent offers: " + strings.Join(ids, ", ")
}

// applyConfig sets mode and opts on the running backend b and reports
// each change on the session's stream.
func (p *Pool) applyConfig(ctx context.Context, s *session, agent string, b backends.Backend, mode string, opts map[string]string) error {
	if mode != "" {
		if err := b.SetMode(ctx, mode); err != nil {
			return fmt.Errorf("set mode %q of agent %q: %w", mode, agent, err)
		}
		p.emit(s, backends.EventMode, agent, map[string]string{"currentModeId": mode})
	}
	ids := slices.Sorted(maps.Keys(opts))
	for _, id := range ids {
		if err := b.SetConfigOption(ctx, id, opts[id]); err != nil {
			return fmt.Errorf("set option %q of agent %q: %w", id, agent, err)
		}
	}
	if len(ids) > 0 {
		p.emit(s, backends.EventConfig, agent, map[string]any{"configOptions": b.Info().ConfigOptions, "set": opts})
	}
	return nil
}

// storeChoice records mode and opts as the session's choice for agent.
func (p *Pool) storeChoice(ctx context.Context, id, agent, mode string, opts map[string]string) error {
	r, err := p.cfg.Store.GetAgent(ctx, id, agent)
	if err != nil {
		return fmt.Errorf("agent %q of session %q: %w", agent, id, err)
	}
	if mode != "" {
		r.Mode = mode
	}
	if len(opts) > 0 {
		r.ConfigOptions = maps.Clone(r.ConfigOptions)
		if r.ConfigOptions == nil {
			r.ConfigOptions = make(map[string]string, len(opts))
		}
		maps.Copy(r.ConfigOptions, opts)
	}
	return p.cfg.Store.UpsertAgent(ctx, r)
}

// applyDefaults applies a provider's "config" defaults to the agent b has
// just started, except where the session chose its own value (rec). A
// default the agent does not offer is reported on the stream and in the
// log, and skipped.
func (p *Pool) applyDefaults(ctx context.Context, s *session, agent string, b backends.Backend, defaults map[string]string, rec AgentRecord) {
	if len(defaults) == 0 {
		return
	}
	adv := backends.AdvertisedFrom(b.Info())
	keys := make([]string, 0, len(defaults))
	for k := range defaults {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	report := func(msg string) {
		p.logger.Warn("provider default not applied", "session", s.id, "agent", agent, "reason", msg)
		p.emit(s, backends.EventError, agent, map[string]string{"error": msg, "stage": "config defaults"})
	}
	for _, k := range keys {
		v := defaults[k]
		if k == ModeKey && (len(adv.Modes) > 0 || !hasOption(adv, ModeKey)) {
			switch {
			case rec.Mode != "" || adv.CurrentMode == v:
			case !adv.HasMode(v):
				report(fmt.Sprintf("provider default mode %q: not offered by the agent (%s)", v, offered("modes", adv.ModeIDs())))
			default:
				if err := b.SetMode(ctx, v); err != nil {
					report(fmt.Sprintf("provider default mode %q: %v", v, err))
				}
			}
			continue
		}
		o, ok := adv.Option(k)
		switch {
		case !ok:
			report(fmt.Sprintf("provider default %q: the agent has no such option (%s)", k, offered("options", adv.OptionIDs())))
		case rec.ConfigOptions[o.ID] != "" || o.Current == v:
		case !o.Allows(v):
			report(fmt.Sprintf("provider default %q: the agent has no value %q (%s)", k, v, offered("values", o.Values())))
		default:
			if err := b.SetConfigOption(ctx, o.ID, v); err != nil {
				report(fmt.Sprintf("provider default %q = %q: %v", k, v, err))
			}
		}
	}
}
