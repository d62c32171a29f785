package mcpshare

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// begin records a call of ss's, whose progress token is token.
func (s *server) begin(ss *mcp.ServerSession, token any) *call {
	c := &call{ss: ss, token: token}
	s.mu.Lock()
	s.inflight[c] = struct{}{}
	s.lastUse = time.Now()
	if token != nil {
		s.nextTok++
		c.upToken = fmt.Sprintf("agentpool-%d", s.nextTok)
		s.progress[c.upToken] = c
	}
	s.mu.Unlock()
	return c
}

func (s *server) end(c *call, err error) {
	s.calls.Add(1)
	if err != nil {
		s.errs.Add(1)
	}
	s.mu.Lock()
	delete(s.inflight, c)
	if c.upToken != "" {
		delete(s.progress, c.upToken)
	}
	s.lastUse = time.Now()
	s.mu.Unlock()
}

// soleCaller returns the agent session whose calls are the only ones in
// flight, nil when there are none or several agents' calls.
func (s *server) soleCaller() *mcp.ServerSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ss *mcp.ServerSession
	for c := range s.inflight {
		if ss != nil && c.ss != ss {
			return nil
		}
		ss = c.ss
	}
	return ss
}

// ErrNoCaller refuses a server's request to its client (sampling,
// elicitation) that no single agent's call can answer.
var ErrNoCaller = errors.New("agentpool: a shared MCP server may ask its client only during one agent's call, and no single agent's call is in flight")

func (s *server) sample(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	ss := s.soleCaller()
	if ss == nil {
		return nil, ErrNoCaller
	}
	return ss.CreateMessage(ctx, req.Params)
}

func (s *server) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	ss := s.soleCaller()
	if ss == nil {
		return nil, ErrNoCaller
	}
	return ss.Elicit(ctx, req.Params)
}

// progressFrom routes a progress notification of the server's to the
// agent whose call it is about, with the agent's own token.
func (s *server) progressFrom(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	tok, _ := req.Params.ProgressToken.(string)
	s.mu.Lock()
	c := s.progress[tok]
	s.mu.Unlock()
	if c == nil {
		return
	}
	p := *req.Params
	p.ProgressToken = c.token
	_ = c.ss.NotifyProgress(ctx, &p)
}

// proxy runs one call of an agent's on the running server.
func proxy[P interface{ SetProgressToken(any) }, R any](s *server, ctx context.Context, ss *mcp.ServerSession, token any, params P,
	do func(*mcp.ClientSession, P) (R, error)) (R, error) {
	var zero R
	up, err := s.ensure(ctx)
	if err != nil {
		s.calls.Add(1)
		s.errs.Add(1)
		return zero, fmt.Errorf("agentpool: the shared MCP server is not running: %w", err)
	}
	c := s.begin(ss, token)
	if c.upToken != "" {
		params.SetProgressToken(c.upToken)
	}
	res, err := do(up.cs, params)
	if err != nil && errors.Is(err, mcp.ErrConnectionClosed) && ctx.Err() == nil {
		// The call was never sent: the server had ended (a crash not yet
		// seen) when it was made. Once that run is cleaned up, the call
		// goes to the next one; a call that was in flight when the
		// server ended fails, as it may have run.
		select {
		case <-up.done:
		case <-ctx.Done():
		}
		if up, err = s.ensure(ctx); err == nil {
			res, err = do(up.cs, params)
		}
	}
	s.end(c, err)
	return res, err
}

func (s *server) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: req.Params.Name}
	if len(req.Params.Arguments) > 0 {
		p.Arguments = req.Params.Arguments
	}
	res, err := proxy(s, ctx, req.Session, req.Params.GetProgressToken(), p, func(cs *mcp.ClientSession, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, p)
	})
	if err == nil && res != nil && res.IsError {
		s.errs.Add(1)
	}
	return res, err
}

func (s *server) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	return proxy(s, ctx, req.Session, req.Params.GetProgressToken(), &mcp.ReadResourceParams{URI: req.Params.URI},
		func(cs *mcp.ClientSession, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
			return cs.ReadResource(ctx, p)
		})
}

func (s *server) getPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	return proxy(s, ctx, req.Session, req.Params.GetProgressToken(), &mcp.GetPromptParams{Name: req.Params.Name, Arguments: req.Params.Arguments},
		func(cs *mcp.ClientSession, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
			return cs.GetPrompt(ctx, p)
		})
}

func (s *server) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	p := *req.Params
	return proxy(s, ctx, req.Session, nil, noProgress{&p},
		func(cs *mcp.ClientSession, p noProgress) (*mcp.CompleteResult, error) {
			return cs.Complete(ctx, p.CompleteParams)
		})
}

// noProgress wraps the params of a request that carries no progress token.
type noProgress struct{ *mcp.CompleteParams }

func (noProgress) SetProgressToken(any) {}
