package acp

import "encoding/json"

// quotaUsage turns the token count some agents put in the prompt answer's
// _meta.quota.token_count instead of its usage (gemini-cli:
// {"input_tokens": 12, "output_tokens": 7}) into the usage's shape
// ({"inputTokens": 12, "outputTokens": 7, "totalTokens": 19}); nil when
// there is none.
func quotaUsage(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var c struct {
		In      *int64 `json:"input_tokens"`
		Out     *int64 `json:"output_tokens"`
		Cached  *int64 `json:"cached_tokens"`
		Thought *int64 `json:"thoughts_tokens"`
		Total   *int64 `json:"total_tokens"`
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.In == nil && c.Out == nil && c.Total == nil {
		return nil
	}
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	u := map[string]int64{"inputTokens": val(c.In), "outputTokens": val(c.Out)}
	if c.Cached != nil {
		u["cachedReadTokens"] = *c.Cached
	}
	if c.Thought != nil {
		u["thoughtTokens"] = *c.Thought
	}
	u["totalTokens"] = val(c.Total)
	if c.Total == nil {
		u["totalTokens"] = val(c.In) + val(c.Out) + val(c.Thought)
	}
	out, err := json.Marshal(u)
	if err != nil {
		return nil
	}
	return out
}
