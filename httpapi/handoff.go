package httpapi

import (
	"context"
	"net/http"

	"github.com/agentpool/agentpool/pool"
)

// Handoffer sets a session's handoff setting: whether, and within what
// bound, an agent taking up the session gets the pool's briefing (see
// pool.HandoffSetting).
type Handoffer interface {
	SetHandoff(ctx context.Context, session string, h pool.HandoffSetting) error
}

var _ Handoffer = (*pool.Pool)(nil)

func (s *Server) handoffer() (Handoffer, error) {
	h, ok := s.pool.(Handoffer)
	if !ok {
		return nil, &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon has no handoff settings"}
	}
	return h, nil
}

// checkHandoff validates a handoff setting of a request.
func checkHandoff(h pool.HandoffSetting) error {
	switch h.Handoff {
	case "", pool.HandoffBrief, pool.HandoffOff:
	default:
		return badRequest("handoff", "field \"handoff\" must be %q or %q, not %q", pool.HandoffBrief, pool.HandoffOff, h.Handoff)
	}
	if h.Bytes != 0 && (h.Bytes < pool.MinBriefingBytes || h.Bytes > pool.MaxBriefingBytes) {
		return badRequest("bytes", "field \"bytes\" must be from %d to %d (or 0: the provider's bound)", pool.MinBriefingBytes, pool.MaxBriefingBytes)
	}
	return nil
}

// putHandoff: PUT /v1/sessions/{id}/handoff {handoff, bytes} sets the
// session's handoff setting → 200 with the setting.
func (s *Server) putHandoff(w http.ResponseWriter, r *http.Request) error {
	h, err := s.handoffer()
	if err != nil {
		return err
	}
	var req pool.HandoffSetting
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if err := checkHandoff(req); err != nil {
		return err
	}
	if err := h.SetHandoff(r.Context(), r.PathValue("id"), req); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, req)
	return nil
}

// SetHandoff sets a session's handoff setting.
func (c *Client) SetHandoff(ctx context.Context, id string, h pool.HandoffSetting) error {
	var out pool.HandoffSetting
	return c.call(ctx, http.MethodPut, sessionPath(id, "handoff"), h, &out)
}
