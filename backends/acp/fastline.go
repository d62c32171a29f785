package acp

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/agentpool/agentpool/internal/jsonscan"
)

// decodeInbound decodes line into m as json.Unmarshal(line, &m) would,
// and returns the span of line that is its update (not a copy), with one
// fast validating pass over the line (jsonscan) and encoding/json
// only for the small fields: a message chunk of a few MiB is scanned
// about twice instead of four times, at several times the speed. It
// reports false, leaving m to json.Unmarshal, for any line whose decoding
// it cannot vouch for: invalid JSON, a member that is not where inbound
// expects it or of another type, a key with escapes or other than ASCII,
// a key encoding/json would take for a known one by its case-insensitive
// match, or a known key twice.
func decodeInbound(line []byte, m *inbound) (updateSpan []byte, ok bool) {
	if !jsonscan.Valid(line) {
		return nil, false
	}
	decodeUpdate := func(val []byte) bool {
		updateSpan = val
		if string(val) == "null" {
			m.Params.Update = nil
			return true
		}
		u := new(update)
		m.Params.Update = u
		return members(val, updateKeys, func(i int, val []byte) bool {
			switch updateKeys[i] {
			case "sessionUpdate":
				return small(val, &u.Kind)
			case "content":
				u.Content = raw(val)
			case "toolCallId":
				return small(val, &u.ToolCallID)
			case "kind":
				return small(val, &u.ToolKind)
			case "currentModeId":
				return small(val, &u.CurrentModeID)
			case "availableCommands":
				u.Commands = raw(val)
			case "configOptions":
				u.ConfigOptions = raw(val)
			case "messageId":
				return small(val, &u.MessageID)
			}
			return true
		})
	}
	decodeParams := func(val []byte) bool {
		if string(val) == "null" {
			return true // a null leaves a struct as it is
		}
		return members(val, paramsKeys, func(i int, val []byte) bool {
			if paramsKeys[i] == "sessionId" {
				return small(val, &m.Params.SessionID)
			}
			return decodeUpdate(val)
		})
	}
	var params []byte
	if !members(line, inboundKeys, func(i int, val []byte) bool {
		switch inboundKeys[i] {
		case "id":
			m.ID = raw(val)
		case "method":
			return small(val, &m.Method)
		case "result":
			m.Result = raw(val)
		case "error":
			m.Error = raw(val)
		case "params":
			params = val
		}
		return true
	}) {
		return nil, false
	}
	if params != nil && !decodeParams(params) {
		return nil, false
	}
	return updateSpan, true
}

// members calls set with the index in known and the value of each known
// member of the object v (valid JSON), in order; it reports false when v
// is not an object, when set does, or when a key is one decodeInbound
// cannot vouch for (see knownKey) or a known key comes twice.
func members(v []byte, known []string, set func(i int, val []byte) bool) bool {
	ok := true
	seen := 0 // the known keys met, by bit
	return jsonscan.Members(v, func(key []byte, escaped bool, val []byte) bool {
		i, fine := knownKey(key, escaped, known)
		switch {
		case !fine || i >= 0 && seen&(1<<i) != 0:
			ok = false
		case i >= 0:
			seen |= 1 << i
			ok = set(i, val)
		}
		return ok
	}) && ok
}

// decodeText decodes content, valid JSON, into tc as json.Unmarshal
// would, or reports false when it cannot vouch for that (see members).
func decodeText(content []byte, tc *textContent) bool {
	return members(content, textKeys, func(i int, val []byte) bool {
		if i == 0 {
			return small(val, &tc.Type)
		}
		tc.Text = val // not kept: chunkData copies it out
		return true
	})
}

// textKeys are textContent's keys, as encoding/json matches them.
var textKeys = []string{"type", "text"}

// The keys of inbound, its params and an update, as encoding/json matches
// them to fields.
var (
	inboundKeys = []string{"id", "method", "result", "error", "params"}
	paramsKeys  = []string{"sessionId", "update"}
	updateKeys  = []string{"sessionUpdate", "content", "toolCallId", "kind", "currentModeId", "availableCommands", "configOptions", "messageId"}
)

// knownKey returns the index of key in known (-1 for another key) and
// whether decodeInbound may go on: false for a key with escapes or
// anything but ASCII, or one that matches a known key only ignoring case
// (encoding/json would take it for that key).
func knownKey(key []byte, escaped bool, known []string) (int, bool) {
	if escaped {
		return -1, false
	}
	for _, c := range key {
		if c >= 0x80 {
			return -1, false
		}
	}
	for i, k := range known {
		if string(key) == k {
			return i, true
		}
		if strings.EqualFold(string(key), k) {
			return -1, false
		}
	}
	return -1, true
}

// small decodes a small member's value into a string field as
// encoding/json would (a null leaves it as it is).
func small(val []byte, dst *string) bool {
	if len(val) > 1 && val[0] == '"' && bytes.IndexByte(val[1:len(val)-1], '\\') < 0 && ascii(val) {
		*dst = string(val[1 : len(val)-1])
		return true
	}
	return json.Unmarshal(val, dst) == nil
}

func ascii(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// raw is a member's value kept as json.RawMessage: a copy, as
// encoding/json makes one (the line's buffer is reused).
func raw(val []byte) json.RawMessage {
	return bytes.Clone(val)
}
