package attempts

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentpool/agentpool/pool"
)

// Pick merges the branch of req.Session, an ended attempt of set id, like
// POST /v1/sessions/{id}/merge into the set's base branch, then closes the
// set's other sessions, keeping their branches (deleting them with
// req.Discard). A refused merge (pool.ErrConflict) changes nothing.
func (m *Manager) Pick(ctx context.Context, id string, req PickRequest) (Set, pool.MergeResult, error) {
	if req.Session == "" {
		return Set{}, pool.MergeResult{}, &FieldError{Field: "session", Message: "the session of the attempt to pick is required"}
	}
	m.mu.Lock()
	s, ok := m.sets[id]
	if !ok {
		m.mu.Unlock()
		return Set{}, pool.MergeResult{}, fmt.Errorf("%q: %w", id, ErrNotFound)
	}
	if s.State == SetPicked {
		m.mu.Unlock()
		return Set{}, pool.MergeResult{}, fmt.Errorf("set %s already picked %s: %w", id, s.Picked, ErrConflict)
	}
	idx := -1
	for i, a := range s.Attempts {
		if a.Session == req.Session {
			idx = i
		}
	}
	if idx < 0 {
		m.mu.Unlock()
		return Set{}, pool.MergeResult{}, &FieldError{Field: "session", Message: fmt.Sprintf("%q is not an attempt of %s", req.Session, id)}
	}
	if st := s.Attempts[idx].State; st != AttemptDone && st != AttemptFailed {
		m.mu.Unlock()
		return Set{}, pool.MergeResult{}, fmt.Errorf("attempt %s is still %s: %w", req.Session, st, ErrConflict)
	}
	if m.picking[id] {
		m.mu.Unlock()
		return Set{}, pool.MergeResult{}, fmt.Errorf("set %s is being picked: %w", id, ErrConflict)
	}
	m.picking[id] = true
	defer func() { m.mu.Lock(); delete(m.picking, id); m.mu.Unlock() }()
	into := s.Into
	others := []string{}
	for _, a := range s.Attempts {
		if a.Session != req.Session && !a.Closed {
			others = append(others, a.Session)
		}
	}
	m.mu.Unlock()
	res, err := m.cfg.Pool.Merge(ctx, req.Session, pool.MergeRequest{Into: into, Squash: req.Squash})
	if err != nil {
		return Set{}, pool.MergeResult{}, err
	}
	closed := map[string]string{}
	for _, o := range others {
		if _, err := m.cfg.Pool.Close(context.WithoutCancel(ctx), o, req.Discard); err != nil && !errors.Is(err, pool.ErrNotFound) {
			closed[o] = err.Error()
			continue
		}
		closed[o] = ""
	}
	m.update(id, func(s *Set) {
		s.State, s.Picked = SetPicked, req.Session
		for i := range s.Attempts {
			if e, ok := closed[s.Attempts[i].Session]; ok {
				if e == "" {
					s.Attempts[i].Closed = true
				} else {
					s.Attempts[i].Error = "close: " + e
				}
			}
		}
	})
	out, err := m.Get(id)
	return out, res, err
}
