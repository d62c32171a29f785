package acpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/permission"
	acp "github.com/coder/acp-go-sdk"
)

// permissionData is the payload of a permission.requested event: a
// request the daemon's rules left to the user.
type permissionData struct {
	Request    string              `json:"request"`
	ToolCallID string              `json:"tool_call_id"`
	Title      string              `json:"title"`
	Kind       string              `json:"kind"`
	Locations  []string            `json:"locations"`
	RawInput   json.RawMessage     `json:"raw_input"`
	Options    []permission.Option `json:"options"`
}

// askPending asks the editor about the requests of the session that wait
// for an answer now (made before the editor attached).
func (s *Server) askPending(ctx context.Context, ss *session) {
	api, err := s.cfg.Connect(ctx)
	if err != nil {
		return
	}
	pending, err := api.Permissions(ctx, ss.id)
	if err != nil {
		s.logger.Debug("pending permissions", "session", ss.id, "err", err)
		return
	}
	for _, p := range pending {
		r := p.Request
		s.ask(ss, permissionData{Request: p.ID, ToolCallID: r.ToolCallID, Title: r.Title, Kind: r.ToolKind,
			Locations: r.Locations, RawInput: r.RawInput, Options: r.Options})
	}
}

// ask sends one permission request to the editor, on a goroutine of its
// own, and gives the editor's answer to the pool. The first answer wins:
// when the page or the CLI answers first, withdraw cancels the editor's
// request; when the editor answers after the pool settled it, its answer
// is dropped.
func (s *Server) ask(ss *session, d permissionData) {
	ss.mu.Lock()
	if _, dup := ss.asked[d.Request]; dup || d.Request == "" {
		ss.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	ss.asked[d.Request] = cancel
	ss.mu.Unlock()
	req := acp.RequestPermissionRequest{SessionId: acp.SessionId(ss.id), Options: []acp.PermissionOption{},
		ToolCall: acp.ToolCallUpdate{ToolCallId: acp.ToolCallId(d.ToolCallID)}}
	if d.Title != "" {
		req.ToolCall.Title = acp.Ptr(d.Title)
	}
	if d.Kind != "" {
		req.ToolCall.Kind = acp.Ptr(acp.ToolKind(d.Kind))
	}
	for _, l := range d.Locations {
		req.ToolCall.Locations = append(req.ToolCall.Locations, acp.ToolCallLocation{Path: l})
	}
	if raw := bytes.TrimSpace(d.RawInput); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		req.ToolCall.RawInput = d.RawInput
	}
	for _, o := range d.Options {
		req.Options = append(req.Options, acp.PermissionOption{OptionId: acp.PermissionOptionId(o.ID), Name: o.Name, Kind: acp.PermissionOptionKind(o.Kind)})
	}
	s.goOwned(func() {
		defer func() {
			cancel()
			ss.mu.Lock()
			delete(ss.asked, d.Request)
			ss.mu.Unlock()
		}()
		<-s.ready
		resp, err := s.conn.RequestPermission(ctx, req)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.Warn("permission request to the editor", "session", ss.id, "request", d.Request, "err", err)
			}
			return
		}
		if resp.Outcome.Selected == nil || ctx.Err() != nil {
			// Cancelled by the editor (its turn was cancelled, and
			// session/cancel follows), or answered elsewhere first.
			return
		}
		api, err := s.cfg.Connect(ctx)
		if err != nil {
			return
		}
		err = api.Answer(context.WithoutCancel(ctx), ss.id, d.Request, string(resp.Outcome.Selected.OptionId))
		var ae *httpapi.Error
		switch {
		case err == nil:
			s.logger.Info("permission answered by the editor", "session", ss.id, "request", d.Request, "option", resp.Outcome.Selected.OptionId)
		case errors.As(err, &ae) && ae.Code == httpapi.CodeUnknownRequest:
			s.logger.Info("permission already answered elsewhere", "session", ss.id, "request", d.Request)
		default:
			s.logger.Warn("answer permission", "session", ss.id, "request", d.Request, "err", err)
		}
	})
}

// withdraw cancels the editor's request for a permission request the pool
// has settled.
func (s *Server) withdraw(ss *session, request string) {
	ss.mu.Lock()
	cancel := ss.asked[request]
	ss.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}
