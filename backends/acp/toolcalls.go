package acp

// maxToolCalls bounds the tool calls a backend remembers; past it the oldest
// announced is forgotten.
const maxToolCalls = 4096

// toolCalls remembers, by toolCallId, the kind the agent announced in its
// tool_call and tool_call_update session/updates. ACP updates are partial: a
// field left out keeps its last value, so an update without a kind keeps the
// kind announced before. A session/request_permission may leave the kind out
// (claude-code-acp does): it takes the kind remembered here.
//
// The filter goroutine notes each update before it reads the next line, so a
// request that follows a tool_call on the wire always finds its kind, even
// though the SDK runs requests on goroutines of their own. It is guarded by
// Backend.mu.
type toolCalls struct {
	kinds map[string]string // id → last announced kind, "" for none yet
	order []string          // ids, oldest first
}

// known reports whether id was announced.
func (tc *toolCalls) known(id string) bool {
	_, ok := tc.kinds[id]
	return ok
}

// note records an update of tool call id; kind "" keeps the kind announced
// before.
func (tc *toolCalls) note(id, kind string) {
	if tc.kinds == nil {
		tc.kinds = make(map[string]string)
	}
	old, ok := tc.kinds[id]
	if ok {
		if kind != "" && kind != old {
			tc.kinds[id] = kind
		}
		return
	}
	if len(tc.order) >= maxToolCalls {
		delete(tc.kinds, tc.order[0])
		tc.order[0] = ""
		tc.order = tc.order[1:]
	}
	tc.kinds[id] = kind
	tc.order = append(tc.order, id)
}

// kind returns the last kind announced for id, "" when none was (or id was
// forgotten).
func (tc *toolCalls) kind(id string) string { return tc.kinds[id] }

// len returns how many tool calls are remembered.
func (tc *toolCalls) len() int { return len(tc.kinds) }
