package acpserver

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
	acp "github.com/coder/acp-go-sdk"
)

// commandsDelay is how long after answering session/new (or load, or
// resume) the slash commands are announced: the SDK writes the answer once
// the handler returns, and an update that overtook it would name a
// session the editor does not know yet. (The session's own events need no
// delay: they follow a prompt, which follows the answer.)
const commandsDelay = 30 * time.Millisecond

// follow forwards the session's events after seq after to the editor
// until ctx ends or the session closes. A broken stream is followed again
// from the last event seen, so nothing is lost or repeated.
func (s *Server) follow(ctx context.Context, ss *session, after int64) {
	// The stream is opened at once, so that the first prompt's events
	// come as soon as a warm session's; they wait for the answer.
	answered := false
	s.goOwned(func() {
		select {
		case <-ss.answered:
		case <-ctx.Done():
			return
		}
		select {
		case <-time.After(commandsDelay):
		case <-ctx.Done():
			return
		}
		s.announceCommands(ctx, ss, nil)
		s.askPending(ctx, ss)
	})
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		api, err := s.cfg.Connect(ctx)
		if err == nil {
			err = api.Events(ctx, ss.id, after, func(ev backends.Event) error {
				if !answered {
					select {
					case <-ss.answered:
						answered = true
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				after = ev.Seq
				s.dispatch(ctx, ss, ev, false)
				backoff = 100 * time.Millisecond
				return nil
			})
			if err == nil {
				s.logger.Info("session closed in the pool", "session", ss.id)
				s.endWaiters(ss, turnEnd{StopReason: string(backends.StopCancelled), Error: "the session was closed"})
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("session events interrupted; following again", "session", ss.id, "after", after, "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// dispatch sends what one event of the session means to the editor. In a
// replay (session/load) only the conversation is sent: the user's
// prompts, the agent's messages and thoughts, tool calls and plans.
func (s *Server) dispatch(ctx context.Context, ss *session, ev backends.Event, replay bool) {
	switch ev.Type {
	case backends.EventTurnStarted:
		var d struct {
			Prompt string `json:"prompt"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		if !replay && s.claimTurn(ss, ev.Turn, d.Prompt) {
			return // the editor shows its own prompt
		}
		if d.Prompt != "" {
			s.update(ss.id, acp.UpdateUserMessageText(d.Prompt))
		}
	case backends.EventTurnEnded:
		if !replay {
			var end turnEnd
			_ = json.Unmarshal(ev.Data, &end)
			s.turnEnded(ss, ev.Turn, end)
		}
	case backends.EventMessageChunk:
		if u, ok := chunkUpdate(ev.Data); ok {
			s.update(ss.id, u)
		}
	case backends.EventToolCall, backends.EventToolUpdate, backends.EventPlan:
		if u, ok := rawUpdate(ev.Data); ok {
			s.update(ss.id, u)
		}
	case backends.EventSessionInfo, backends.EventUsage:
		if u, ok := rawUpdate(ev.Data); ok && !replay {
			s.update(ss.id, u)
		}
	case backends.EventCommands:
		if !replay && ev.Agent == ss.currentAgent() {
			var u acp.SessionAvailableCommandsUpdate
			if json.Unmarshal(ev.Data, &u) == nil {
				s.announceCommands(ctx, ss, u.AvailableCommands)
			}
		}
	case backends.EventMode:
		if !replay && ev.Agent == ss.currentAgent() {
			var d struct {
				CurrentModeID string `json:"currentModeId"`
			}
			if json.Unmarshal(ev.Data, &d) == nil && d.CurrentModeID != "" {
				s.update(ss.id, acp.SessionUpdate{CurrentModeUpdate: &acp.SessionCurrentModeUpdate{CurrentModeId: acp.SessionModeId(d.CurrentModeID)}})
			}
		}
	case backends.EventConfig:
		if !replay && ev.Agent == ss.currentAgent() {
			s.announceLater(ctx, ss, false)
		}
	case backends.EventAgentReady:
		// The session's agent (re)started: a switched-to agent's first
		// start, a cold session's agent, a restart. What it offers is
		// known now; the editor had only the Agent option, or the
		// previous agent's, until then.
		if !replay && ev.Agent == ss.currentAgent() {
			s.announceLater(ctx, ss, true)
		}
	case backends.EventPermissionRequest:
		if !replay {
			var d permissionData
			if json.Unmarshal(ev.Data, &d) == nil {
				s.ask(ss, d)
			}
		}
	case backends.EventPermissionResolved:
		if !replay {
			var d struct {
				Request string `json:"request"`
			}
			if json.Unmarshal(ev.Data, &d) == nil {
				s.withdraw(ss, d.Request)
			}
		}
	}
}

// announceLater announces what the session's agent offers (all:
// announceAgent, else announceOptions) on a goroutine of its own, so that
// the events that follow, a cold session's first chunk among them, do not
// wait for its calls to the daemon. One announcement runs at a time per
// session; those asked for meanwhile make one more (see announcer).
func (s *Server) announceLater(ctx context.Context, ss *session, all bool) {
	if !ss.announce.ask(all) {
		return
	}
	s.goOwned(func() {
		for {
			all, ok := ss.announce.next()
			if !ok {
				return
			}
			if all {
				s.announceAgent(ctx, ss)
			} else {
				s.announceOptions(ctx, ss)
			}
		}
	})
}

// announcer coalesces a session's announcements: each reads the state
// when it runs, so asks made while one runs need one more run, not one
// each (an agent that floods config updates costs one announcement in
// flight, never a goroutine per update).
type announcer struct {
	mu      sync.Mutex
	running bool
	all     bool // announceAgent was asked for (it sends the options too)
	options bool
}

// ask records an announcement; it reports whether the caller must start
// the goroutine that makes them (none runs).
func (a *announcer) ask(all bool) (start bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if all {
		a.all = true
	} else {
		a.options = true
	}
	start = !a.running
	a.running = true
	return start
}

// next returns the announcement to make now, and false once none is
// asked for: the goroutine then ends, and the next ask starts another.
func (a *announcer) next() (all, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	all, ok = a.all, a.all || a.options
	a.all, a.options = false, false
	a.running = ok
	return all, ok
}

// chunkUpdate is the update of a message.chunk event: agent text or
// thought. An agent's echo of a user message is the agent's words, never
// shown as the user's.
func chunkUpdate(data json.RawMessage) (acp.SessionUpdate, bool) {
	var c backends.ChunkData
	if json.Unmarshal(data, &c) != nil {
		return acp.SessionUpdate{}, false
	}
	block := acp.TextBlock(c.Text)
	if c.Text == "" && len(c.Content) > 0 {
		if json.Unmarshal(c.Content, &block) != nil {
			return acp.SessionUpdate{}, false
		}
	}
	var id *string
	if c.MessageID != "" {
		id = acp.Ptr(c.MessageID)
	}
	switch c.Role {
	case backends.RoleAgent:
		return acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: block, MessageId: id}}, true
	case backends.RoleThought:
		return acp.SessionUpdate{AgentThoughtChunk: &acp.SessionUpdateAgentThoughtChunk{Content: block, MessageId: id}}, true
	}
	return acp.SessionUpdate{}, false
}

// passedKinds are the update kinds whose event data is the agent's ACP
// update verbatim and passes to the editor as is.
var passedKinds = map[string]bool{
	"tool_call": true, "tool_call_update": true, "plan": true, "session_info_update": true, "usage_update": true,
}

// rawUpdate decodes an agent's update kept verbatim, checking its kind
// first: the SDK decodes an unknown kind as a known one.
func rawUpdate(data json.RawMessage) (acp.SessionUpdate, bool) {
	var k struct {
		Kind string `json:"sessionUpdate"`
	}
	if json.Unmarshal(data, &k) != nil || !passedKinds[k.Kind] {
		return acp.SessionUpdate{}, false
	}
	var u acp.SessionUpdate
	if json.Unmarshal(data, &u) != nil {
		return acp.SessionUpdate{}, false
	}
	return u, true
}

// claimTurn reports whether turn, which started with prompt, is the one
// the editor's running session/prompt started, and records it as such.
func (s *Server) claimTurn(ss *session, turn int64, prompt string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ourTurn == turn && turn != 0 {
		return true
	}
	if ss.prompting && ss.ourTurn == 0 && prompt == ss.promptText {
		ss.ourTurn = turn
		return true
	}
	return false
}

// turnEnded wakes whoever waits for turn, or keeps its end for them.
func (s *Server) turnEnded(ss *session, turn int64, end turnEnd) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ch, ok := ss.waiters[turn]; ok {
		ch <- end
		delete(ss.waiters, turn)
		return
	}
	if len(ss.ended) >= maxEnded {
		clear(ss.ended)
	}
	ss.ended[turn] = end
}

// endWaiters ends every wait of the session with end.
func (s *Server) endWaiters(ss *session, end turnEnd) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for turn, ch := range ss.waiters {
		ch <- end
		delete(ss.waiters, turn)
	}
}

// waitTurn returns a channel that receives how turn ends.
func (s *Server) waitTurn(ss *session, turn int64) <-chan turnEnd {
	ch := make(chan turnEnd, 1)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if end, ok := ss.ended[turn]; ok {
		delete(ss.ended, turn)
		ch <- end
		return ch
	}
	ss.waiters[turn] = ch
	return ch
}
