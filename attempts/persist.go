package attempts

import (
	"context"
	"encoding/json"
	"fmt"
)

// interrupted is the error of an attempt that had not ended when the
// daemon stopped.
const interrupted = "interrupted: the daemon stopped before this attempt ended"

// save stores the set id; a failure is logged, the set staying in memory.
func (m *Manager) save(id string) {
	if m.cfg.Store == nil {
		return
	}
	m.mu.Lock()
	s, ok := m.sets[id]
	if !ok {
		m.mu.Unlock()
		return
	}
	body, err := json.Marshal(s)
	created := s.CreatedAt
	m.mu.Unlock()
	if err == nil {
		err = m.cfg.Store.SaveAttemptSet(context.WithoutCancel(m.ctx), id, created, body)
	}
	if err != nil {
		m.log.Warn("store an attempt set", "set", id, "err", err)
	}
}

// load reads the stored sets, marking the attempts that had not ended as
// failed, interrupted.
func (m *Manager) load(ctx context.Context) error {
	bodies, err := m.cfg.Store.ListAttemptSets(ctx)
	if err != nil {
		return fmt.Errorf("load attempt sets: %w", err)
	}
	for _, b := range bodies {
		var s Set
		if err := json.Unmarshal(b, &s); err != nil {
			m.log.Warn("skip an unreadable attempt set", "err", err)
			continue
		}
		changed := false
		for i := range s.Attempts {
			a := &s.Attempts[i]
			if a.State != AttemptDone && a.State != AttemptFailed {
				a.State, a.Error, changed = AttemptFailed, interrupted, true
				if a.Check != nil && (a.Check.State == CheckPending || a.Check.State == CheckRunning) {
					a.Check.State = CheckNone
				}
			}
		}
		if s.State == SetRunning {
			s.State = SetDone
		}
		m.sets[s.ID] = &s
		if changed {
			m.save(s.ID)
		}
	}
	return nil
}
