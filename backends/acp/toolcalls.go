package acp

// maxToolCalls bounds the tool calls a backend remembers; past it the oldest
// announced is forgotten.
const maxToolCalls = 4096

// toolCalls remembers, by toolCallId, the kind the agent announced in its
// tool_call and tool_call_update session/updates, and the turn it last
// announced it in. ACP updates are partial: a field left out keeps its last
// value, so an update without a kind keeps the kind announced before. A
// session/request_permission may leave the kind out (claude-code-acp
// does): it takes the kind remembered here.
//
// A repeated tool_call for an id announced in the same turn is an update
// (ACP-NOTES item 4); a tool_call for an id last seen in an earlier turn
// is a new call: no tool call outlives its turn, and an agent that numbers
// its calls per turn (the demo agent, "read-1" on every prompt) starts
// each turn's calls afresh.
//
// The filter goroutine notes each update before it reads the next line, so a
// request that follows a tool_call on the wire always finds its kind, even
// though the SDK runs requests on goroutines of their own. It is guarded by
// Backend.mu.
type toolCalls struct {
	calls map[string]toolCall // by id
	order []string            // ids, oldest first
	turn  int64               // the current turn; see startTurn
}

// toolCall is what toolCalls remembers of one id.
type toolCall struct {
	kind string // last announced kind, "" for none yet
	turn int64  // toolCalls.turn when it was last announced
}

// startTurn begins a turn: ids announced before it are no longer known.
func (tc *toolCalls) startTurn() { tc.turn++ }

// known reports whether id was announced in the current turn.
func (tc *toolCalls) known(id string) bool {
	c, ok := tc.calls[id]
	return ok && c.turn == tc.turn
}

// note records an update of tool call id; kind "" keeps the kind announced
// before.
func (tc *toolCalls) note(id, kind string) {
	if tc.calls == nil {
		tc.calls = make(map[string]toolCall)
	}
	if c, ok := tc.calls[id]; ok {
		if kind != "" {
			c.kind = kind
		}
		c.turn = tc.turn
		tc.calls[id] = c
		return
	}
	if len(tc.order) >= maxToolCalls {
		delete(tc.calls, tc.order[0])
		tc.order[0] = ""
		tc.order = tc.order[1:]
	}
	tc.calls[id] = toolCall{kind: kind, turn: tc.turn}
	tc.order = append(tc.order, id)
}

// kind returns the last kind announced for id, in any turn, "" when none
// was (or id was forgotten).
func (tc *toolCalls) kind(id string) string { return tc.calls[id].kind }

// len returns how many tool calls are remembered.
func (tc *toolCalls) len() int { return len(tc.calls) }
