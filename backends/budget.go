package backends

// Budget is a limit on what an agent may use: tokens (summed over turns)
// and cost (the agents' cumulative cost, summed over agent sessions).
// Zero fields set no limit. Cost counts only what is reported in
// Currency; cost in another currency is never converted.
type Budget struct {
	// Tokens is the most tokens that may be used (0: no limit).
	Tokens int64 `json:"tokens,omitempty"`
	// Cost is the most that may be spent in Currency (0: no limit).
	Cost float64 `json:"cost,omitempty"`
	// Currency is the ISO 4217 code of Cost ("USD").
	Currency string `json:"currency,omitempty"`
}

// IsZero reports whether b sets no limit.
func (b Budget) IsZero() bool { return b.Tokens <= 0 && b.Cost <= 0 }
