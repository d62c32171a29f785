package pool

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/agentpool/agentpool/backends"
)

// Bounds of the numbers an agent reports, per report: a value outside
// them (or not a finite number) is dropped, never stored nor summed.
const (
	// MaxReportedTokens bounds a token count or a context size.
	MaxReportedTokens = 1e12
	// MaxReportedCost bounds a cost amount.
	MaxReportedCost = 1e9
)

// EventUsageDropped is published when a number an agent reported (in a
// usage_update or in the prompt answer's usage) is dropped because it is
// not a finite number within bounds; its data is a UsageDropped.
const EventUsageDropped backends.EventType = "usage.dropped"

// UsageDropped says which number an agent reported was dropped, and why.
type UsageDropped struct {
	// Dropped is the field, by its ACP name: "cost.amount", "used",
	// "size", "inputTokens", ...
	Dropped string `json:"dropped"`
	// Value is the value as the agent sent it (shortened when long).
	Value string `json:"value"`
	// Reason says what is wrong with it.
	Reason string `json:"reason"`
}

// numberKind is what a reported number must be.
type numberKind int

const (
	countNumber  numberKind = iota // a whole number in [0, MaxReportedTokens]
	amountNumber                   // a number in [0, MaxReportedCost]
)

// checkNumber reads the reported number raw of field: ok is false when it
// is absent (missing or null); drop is non-nil when it is refused.
func checkNumber(field string, raw json.RawMessage, kind numberKind) (v float64, ok bool, drop *UsageDropped) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	refuse := func(reason string) (float64, bool, *UsageDropped) {
		s := string(raw)
		if len(s) > 64 {
			s = s[:64] + "…"
		}
		return 0, false, &UsageDropped{Dropped: field, Value: s, Reason: reason}
	}
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return refuse("not a number")
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	switch {
	case err != nil || math.IsInf(f, 0) || math.IsNaN(f):
		return refuse("not a finite number")
	case f < 0:
		return refuse("negative")
	case kind == countNumber && f != math.Trunc(f):
		return refuse("not a whole number")
	case kind == countNumber && f > MaxReportedTokens:
		return refuse("over the bound of " + strconv.FormatFloat(MaxReportedTokens, 'g', -1, 64) + " per report")
	case kind == amountNumber && f > MaxReportedCost:
		return refuse("over the bound of " + strconv.FormatFloat(MaxReportedCost, 'g', -1, 64) + " per report")
	}
	return f, true, nil
}

// rawUsageUpdate is the data of a usage event (ACP usage_update), its
// numbers unread.
type rawUsageUpdate struct {
	Used json.RawMessage `json:"used"`
	Size json.RawMessage `json:"size"`
	Cost *struct {
		Amount   json.RawMessage `json:"amount"`
		Currency string          `json:"currency"`
	} `json:"cost"`
}

// parseUsageUpdate reads a usage event's data, keeping only the numbers
// within bounds; drops says what was left out. ok is false when data is
// not an object. A bad context figure drops both (they go together); a
// cost without a valid amount is no cost.
func parseUsageUpdate(data json.RawMessage) (u usageUpdate, drops []UsageDropped, ok bool) {
	var r rawUsageUpdate
	if err := json.Unmarshal(data, &r); err != nil {
		return usageUpdate{}, nil, false
	}
	used, hasUsed, dUsed := checkNumber("used", r.Used, countNumber)
	size, hasSize, dSize := checkNumber("size", r.Size, countNumber)
	for _, d := range []*UsageDropped{dUsed, dSize} {
		if d != nil {
			drops = append(drops, *d)
		}
	}
	if dUsed == nil && dSize == nil {
		if hasUsed {
			n := int64(used)
			u.Used = &n
		}
		if hasSize {
			n := int64(size)
			u.Size = &n
		}
	}
	if r.Cost != nil {
		amount, has, d := checkNumber("cost.amount", r.Cost.Amount, amountNumber)
		if d != nil {
			drops = append(drops, *d)
		}
		if has {
			u.Cost = &struct {
				Amount   float64 `json:"amount"`
				Currency string  `json:"currency"`
			}{amount, r.Cost.Currency}
		}
	}
	return u, drops, true
}

// boundUsage returns ev with the numbers out of bounds left out when it
// is a usage event (ACP usage_update), and what was left out: the event
// published and stored carries only numbers within bounds, so that what
// shows it (the CLI's "cost so far", the page) never shows a dropped
// one. A bad context figure takes the other with it (they go together),
// a bad cost amount its whole cost; every other field stays as the agent
// sent it. Any other event is returned as it is.
func boundUsage(ev backends.Event) (backends.Event, []UsageDropped) {
	if ev.Type != backends.EventUsage {
		return ev, nil
	}
	_, drops, ok := parseUsageUpdate(ev.Data)
	if !ok || len(drops) == 0 {
		return ev, drops
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(ev.Data, &fields); err != nil {
		return ev, drops
	}
	for _, d := range drops {
		switch d.Dropped {
		case "used", "size":
			delete(fields, "used")
			delete(fields, "size")
		case "cost.amount":
			delete(fields, "cost")
		}
	}
	data, err := json.Marshal(fields)
	if err != nil {
		return ev, drops
	}
	ev.Data = data
	return ev, drops
}

// checkPromptUsage reads the prompt answer's usage, keeping only the
// token counts within bounds. It returns the usage to keep: raw itself
// when nothing was dropped, else the counts kept (ACP names), or nil when
// none is left; drops says what was left out. A usage that is not an
// object is dropped whole.
func checkPromptUsage(raw json.RawMessage) (json.RawMessage, []UsageDropped) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return raw, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		s := string(raw)
		if len(s) > 64 {
			s = s[:64] + "…"
		}
		return nil, []UsageDropped{{Dropped: "usage", Value: s, Reason: "not an object"}}
	}
	var u promptUsage
	var drops []UsageDropped
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"inputTokens", &u.Input}, {"outputTokens", &u.Output}, {"cachedReadTokens", &u.CachedRead},
		{"cachedWriteTokens", &u.CachedWrite}, {"thoughtTokens", &u.Thought}, {"totalTokens", &u.Total}} {
		v, ok, d := checkNumber(f.name, fields[f.name], countNumber)
		if d != nil {
			drops = append(drops, *d)
		}
		if ok {
			*f.dst = int64(v)
		}
	}
	if len(drops) == 0 {
		return raw, nil
	}
	if u == (promptUsage{}) {
		return nil, drops
	}
	return backends.MustJSON(u), drops
}

// publishDrops notes in session s's events the numbers of agent's
// report that were dropped.
func (p *Pool) publishDrops(s *session, agent string, turn int64, drops []UsageDropped) {
	for _, d := range drops {
		p.logger.Warn("dropped a number the agent reported", "session", s.id, "agent", agent,
			"field", d.Dropped, "value", d.Value, "reason", d.Reason)
		p.publish(s, backends.Event{Time: p.cfg.Now(), Type: EventUsageDropped, Agent: agent, Turn: turn,
			Data: backends.MustJSON(d)})
	}
}

// addSat adds b to a, saturating at the bounds of int64.
func addSat(a, b int64) int64 {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}
