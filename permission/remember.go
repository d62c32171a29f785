package permission

// Remembered is a person's answer that a session keeps for the later
// requests of one agent's action: allow_always or reject_always. The
// broker holds the remembered answers of the sessions in memory; whoever
// owns the sessions stores them (Record.Remembered says which records
// carry one) and gives them back with Remember when a session is loaded.
type Remembered struct {
	Agent  string `json:"agent"`
	Action Action `json:"action"`
	// Kind is KindAllowAlways or KindRejectAlways.
	Kind string `json:"kind"`
}

// remembers says whether an answer of kind k for action a is remembered:
// the "always" kinds, except for ActionUnknown, which is no one kind of
// tool (allowing one kind-less call always would allow every kind-less
// call of any kind).
func remembers(k string, a Action) bool {
	return (k == KindAllowAlways || k == KindRejectAlways) && a != ActionUnknown
}

// Remembered returns the answer that r makes its session remember, if any:
// a person's allow_always or reject_always.
func (r Record) Remembered() (Remembered, bool) {
	if r.DecidedBy != DecidedByUser || r.Cancelled || !remembers(r.OptionKind, r.Action) {
		return Remembered{}, false
	}
	return Remembered{Agent: r.Agent, Action: r.Action, Kind: r.OptionKind}, true
}

// Remember replaces the answers remembered for session with rs, as stored
// by the session's owner: the pool calls it when it loads a session (after
// a restart, an eviction from memory, a move from another host or a
// takeover). Entries of another kind, or for ActionUnknown, are ignored.
func (b *Broker) Remember(session string, rs []Remembered) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.always, session)
	for _, r := range rs {
		b.rememberLocked(session, r)
	}
}

// rememberLocked remembers r for session.
func (b *Broker) rememberLocked(session string, r Remembered) {
	if !remembers(r.Kind, r.Action) {
		return
	}
	if b.always[session] == nil {
		b.always[session] = make(map[grant]string)
	}
	b.always[session][grant{r.Agent, r.Action}] = r.Kind
}
