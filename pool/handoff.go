package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Handoff settings: of a provider (backends.Spec.Handoff) and of a
// session (HandoffSetting.Handoff).
const (
	// HandoffBrief sends a briefing to an agent that takes up a session
	// whose record it has not seen (the default of ACP providers).
	HandoffBrief = "brief"
	// HandoffOff sends none.
	HandoffOff = "off"
	// HandoffType, for a terminal (PTY) provider, types the briefing
	// ahead of the user's words (PTY providers send none by default);
	// for an ACP provider it is HandoffBrief.
	HandoffType = "type"
)

// EventSessionHandoff records a session's handoff setting; its data is a
// HandoffSetting. The last one in a session's log is in force.
const EventSessionHandoff = "session.handoff"

// HandoffSetting is a session's own handoff setting.
type HandoffSetting struct {
	// Handoff is HandoffBrief, HandoffOff, or "" (the provider's).
	Handoff string `json:"handoff,omitempty"`
	// Bytes bounds the session's briefings (0: the provider's, else
	// DefaultBriefingBytes).
	Bytes int `json:"bytes,omitempty"`
}

// Validate checks h.
func (h HandoffSetting) Validate() error {
	switch h.Handoff {
	case "", HandoffBrief, HandoffOff:
	default:
		return fmt.Errorf("%w: handoff %q: want %q or %q", ErrInvalid, h.Handoff, HandoffBrief, HandoffOff)
	}
	if h.Bytes != 0 && (h.Bytes < MinBriefingBytes || h.Bytes > MaxBriefingBytes) {
		return fmt.Errorf("%w: handoff bytes %d: want %d to %d", ErrInvalid, h.Bytes, MinBriefingBytes, MaxBriefingBytes)
	}
	return nil
}

// EventTypeReader is what a Store may also do: read a session's stored
// events of some types only (see store.EventsOfTypes). Without it,
// briefings page through every event.
type EventTypeReader interface {
	EventsOfTypes(ctx context.Context, session string, types []string) ([]backends.Event, error)
}

// ReviewReader lists a session's reviews, oldest first (Config.Reviews).
type ReviewReader interface {
	Reviews(ctx context.Context, session string) ([]Review, error)
}

// SetHandoff sets the session's handoff setting; it is recorded in the
// session's log (session.handoff) and holds from the next turn on.
func (p *Pool) SetHandoff(ctx context.Context, id string, h HandoffSetting) error {
	if err := h.Validate(); err != nil {
		return err
	}
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("session %q: %w", id, ErrClosed)
	}
	p.emit(s, EventSessionHandoff, "", h)
	return nil
}

// checkCreateHandoff checks the handoff setting of a new session.
func checkCreateHandoff(req CreateRequest) error {
	if req.Handoff == nil {
		return nil
	}
	return req.Handoff.Validate()
}

// createHandoff records the handoff setting of session, just created by
// req, if it has one. It holds from the session's second turn on, the
// first one that can need a briefing.
func (p *Pool) createHandoff(session string, req CreateRequest) {
	if req.Handoff == nil || *req.Handoff == (HandoffSetting{}) {
		return
	}
	if err := p.SetHandoff(context.WithoutCancel(p.ctx), session, *req.Handoff); err != nil {
		p.logger.Warn("record the new session's handoff setting", "session", session, "err", err)
	}
}

// briefTypes are the events a briefing is made of.
var briefTypes = []string{string(backends.EventTurnStarted), string(backends.EventTurnEnded), EventSessionHandoff}

// handoffOf is how tr's agent takes a briefing by its provider's
// setting: "" for none, else the delivery ("resource", "text", "typed");
// info is what its backend advertised.
func handoffOf(spec backends.Spec, info backends.Info) string {
	if spec.Handoff == HandoffOff {
		return ""
	}
	if spec.Kind == backends.KindPTY {
		if spec.Handoff == HandoffType || spec.Handoff == HandoffBrief {
			return "typed"
		}
		return ""
	}
	if info.EmbeddedContext {
		return "resource"
	}
	return "text"
}

// briefing is the briefing that turn t of s carries to its agent e (whose
// backend b runs it), or nil: when the agent's conversation holds every
// earlier turn of the session, or handoff is off. It publishes
// turn.briefing. A failure to read the record is logged and sends none:
// a turn never fails for want of a briefing.
func (p *Pool) briefing(s *session, e *entry, b backends.Backend, tr *turnRun, t Turn) *backends.Briefing {
	delivery := handoffOf(tr.spec, b.Info())
	if delivery == "" {
		return nil
	}
	p.mu.Lock()
	heard, resumed := e.heard, e.resumed
	p.mu.Unlock()
	if heard != 0 && heard == t.ID-1 {
		return nil // it ran the last turn itself
	}
	if t.ID <= 1 {
		// The session's first turn: there is nothing to tell, and a
		// session's first prompt (an adopted spare's, say) must not wait
		// for a read of its record and a diff. A fork's copied turns keep
		// their numbers, so its first turn is not numbered 1.
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 10*time.Second)
	defer cancel()
	d, ok, err := p.makeBriefing(ctx, s, t.Agent, t.ID, t.CheckpointBefore, heard, resumed, tr.spec.HandoffBytes)
	if err != nil {
		p.logger.Warn("read the session's record for a briefing", "session", s.id, "turn", t.ID, "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	d.Delivery = delivery
	p.publish(s, backends.Event{Type: EventTurnBriefing, Agent: t.Agent, Turn: t.ID, Data: backends.MustJSON(d)})
	return &backends.Briefing{URI: d.URI, Text: d.Text}
}

// makeBriefing makes the briefing of turn of s for agent, whose
// conversation holds the session's turns up to heard (0: none; with
// resumed, its own); ok is false when there is nothing it missed or the
// session's handoff is off. at is the checkpoint of the worktree taken
// before the turn ("": its live state); providerBytes is the provider's
// bound. The worktree's diff is read while the record is.
func (p *Pool) makeBriefing(ctx context.Context, s *session, agent string, turn int64, at string, heard int64, resumed bool, providerBytes int) (d BriefingData, ok bool, err error) {
	s.mu.Lock()
	wt := s.wt
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type diffResult struct {
		d   Diff
		err error
	}
	diffed := make(chan diffResult, 1)
	go func() {
		d, err := p.cfg.Worktrees.Diff(ctx, wt, "", at)
		diffed <- diffResult{d, err}
	}()
	defer func() {
		if !ok {
			cancel() // the diff is not needed: end it, and wait for it
			<-diffed
		}
	}()
	in, setting, err := p.briefRecord(ctx, s.id, turn)
	if err != nil {
		return d, false, err
	}
	if setting.Handoff == HandoffOff || len(in.Turns) == 0 {
		return d, false, nil
	}
	since := heard
	if since == 0 && resumed {
		// Its conversation was resumed: it holds the agent's own turns.
		for _, bt := range in.Turns {
			if bt.Agent == agent {
				since = bt.ID
			}
		}
	}
	kept := in.Turns[:0]
	for _, bt := range in.Turns {
		if bt.ID > since {
			kept = append(kept, bt)
		}
	}
	if len(kept) == 0 {
		return d, false, nil
	}
	in.Turns, in.Since, in.Agent, in.Session, in.Turn = kept, since, agent, s.id, turn
	in.Limit = DefaultBriefingBytes
	if providerBytes > 0 {
		in.Limit = providerBytes
	}
	if setting.Bytes > 0 {
		in.Limit = setting.Bytes
	}
	if r := <-diffed; r.err == nil {
		in.Live = &r.d
	} else {
		p.logger.Warn("the worktree's diff for a briefing", "session", s.id, "turn", turn, "err", r.err)
	}
	in.Comments = p.openComments(ctx, s.id)
	d = buildBriefing(in)
	d.URI = "agentpool://session/" + s.id + "/briefing"
	return d, true, nil
}

// briefRecord reads the turns of session before turn from its log,
// oldest first, and its handoff setting.
func (p *Pool) briefRecord(ctx context.Context, session string, turn int64) (briefInput, HandoffSetting, error) {
	var in briefInput
	var setting HandoffSetting
	// The previous turn's turn.ended may still be queued.
	if err := p.cfg.Store.Flush(ctx); err != nil {
		return in, setting, fmt.Errorf("flush: %w", err)
	}
	evs, err := p.eventsOfTypes(ctx, session, briefTypes)
	if err != nil {
		return in, setting, err
	}
	in.Turns = briefTurns(evs, turn, &setting)
	return in, setting, nil
}

// briefTurns makes the turns before turn out of their turn.started and
// turn.ended events, and puts the last session.handoff into setting.
// "Before" is by place in the log: the turns whose turn.started comes
// before turn's own (its last one), so that a history copied from
// another session (a fork), whose numbers may meet the session's own,
// counts whole; a turn.ended belongs to the last turn.started of its
// number before it.
func briefTurns(evs []backends.Event, turn int64, setting *HandoffSetting) []briefTurn {
	cutoff := int64(-1)
	for _, ev := range evs {
		if ev.Type == backends.EventTurnStarted && ev.Turn == turn {
			cutoff = ev.Seq
		}
	}
	var turns []briefTurn
	at := map[int64]int{}
	for _, ev := range evs {
		if cutoff >= 0 && ev.Seq >= cutoff {
			break
		}
		switch string(ev.Type) {
		case EventSessionHandoff:
			var h HandoffSetting
			if json.Unmarshal(ev.Data, &h) == nil {
				*setting = h
			}
		case string(backends.EventTurnStarted):
			if ev.Turn == 0 || cutoff < 0 && ev.Turn == turn {
				continue
			}
			var st struct {
				Agent  string `json:"agent"`
				Prompt string `json:"prompt"`
			}
			_ = json.Unmarshal(ev.Data, &st)
			if st.Agent == "" {
				st.Agent = ev.Agent
			}
			at[ev.Turn] = len(turns)
			turns = append(turns, briefTurn{ID: ev.Turn, Agent: st.Agent, Prompt: st.Prompt})
		case string(backends.EventTurnEnded):
			i, ok := at[ev.Turn]
			if !ok {
				continue
			}
			var en struct {
				StopReason string     `json:"stop_reason"`
				Error      string     `json:"error"`
				Changes    *DiffStat  `json:"changes"`
				Files      []TurnFile `json:"files"`
				Answer     string     `json:"answer"`
			}
			_ = json.Unmarshal(ev.Data, &en)
			bt := &turns[i]
			bt.Ended, bt.StopReason, bt.Error, bt.Stat, bt.Files, bt.Answer = true, en.StopReason, en.Error, en.Changes, en.Files, en.Answer
		}
	}
	return turns
}

// eventsOfTypes reads session's stored events of types.
func (p *Pool) eventsOfTypes(ctx context.Context, session string, types []string) ([]backends.Event, error) {
	if r, ok := p.cfg.Store.(EventTypeReader); ok {
		return r.EventsOfTypes(ctx, session, types)
	}
	var out []backends.Event
	var after int64
	for {
		page, err := p.cfg.Store.EventsPage(ctx, session, after, 1000, 8<<20)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			return out, nil
		}
		for _, ev := range page {
			for _, t := range types {
				if string(ev.Type) == t {
					out = append(out, ev)
				}
			}
		}
		after = page[len(page)-1].Seq
	}
}

// openComments lists the session's review comments not found addressed,
// oldest first; none without Config.Reviews.
func (p *Pool) openComments(ctx context.Context, session string) []openComment {
	if p.cfg.Reviews == nil {
		return nil
	}
	rvs, err := p.cfg.Reviews.Reviews(ctx, session)
	if err != nil {
		p.logger.Warn("the session's reviews for a briefing", "session", session, "err", err)
		return nil
	}
	var out []openComment
	for _, rv := range rvs {
		for _, c := range rv.Comments {
			if c.Addressed == nil || !*c.Addressed {
				out = append(out, openComment{Turn: rv.Turn, ReviewComment: c})
			}
		}
	}
	return out
}

// answerText keeps the final answer of a running turn: the agent's text
// after its last tool call (or before it, when it said nothing after),
// bounded.
type answerText struct {
	cur, prev strings.Builder
	cut       bool
}

// note takes one event of the turn.
func (a *answerText) note(ev backends.Event) {
	switch ev.Type {
	case backends.EventToolCall:
		if a.cur.Len() > 0 {
			a.prev.Reset()
			a.prev.WriteString(a.cur.String())
			a.cur.Reset()
		}
	case backends.EventMessageChunk:
		if a.cut && a.cur.Len() >= maxAnswerBytes {
			// Full: nothing of this chunk would be kept, and decoding it
			// (a flood's megabytes) would cost the CPU other sessions
			// wait for.
			return
		}
		var c backends.ChunkData
		if json.Unmarshal(ev.Data, &c) != nil || c.Role != backends.RoleAgent || c.Text == "" {
			return
		}
		if room := maxAnswerBytes - a.cur.Len(); room < len(c.Text) {
			a.cur.WriteString(cutBytes(c.Text, max(room, 0)))
			a.cut = true
			return
		}
		a.cur.WriteString(c.Text)
	}
}

// text is the final answer.
func (a *answerText) text() string {
	s := a.cur.String()
	if strings.TrimSpace(s) == "" {
		s = a.prev.String()
	}
	if a.cut && len(s) >= maxAnswerBytes {
		s += " … [cut]"
	}
	return s
}
