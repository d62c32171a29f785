package acpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentpool/agentpool/backends"
	acp "github.com/coder/acp-go-sdk"
)

// Prompt posts the prompt to the pool session and returns once its turn
// has ended; meanwhile the session's follower streams the turn's events as
// session/update notifications. The pool's own slash commands are
// answered here, in the thread.
func (s *Server) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	ss, err := s.sessionOf(p.SessionId)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	text, err := promptText(p.Prompt)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	if name, args, ok := slashCommand(text); ok {
		if c := s.command(name); c != nil {
			return s.runCommand(ctx, ss, c, args)
		}
	}
	ss.mu.Lock()
	if ss.prompting {
		ss.mu.Unlock()
		return acp.PromptResponse{}, &acp.RequestError{Code: codeInvalidRequest,
			Message: "a prompt is already running in this session: wait for it to end, or cancel it"}
	}
	ss.prompting, ss.promptText, ss.ourTurn = true, text, 0
	agent := ss.agent
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		ss.prompting, ss.promptText, ss.ourTurn = false, "", 0
		ss.mu.Unlock()
	}()
	api, err := s.api(ctx)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	// session/cancel cancels ctx; the turn must still be followed to its
	// end, which the pool's cancel brings about.
	turn, err := api.Prompt(context.WithoutCancel(ctx), ss.id, agent, text, false)
	if err != nil {
		return acp.PromptResponse{}, reqErr(err)
	}
	ss.mu.Lock()
	ss.ourTurn = turn.ID
	ss.mu.Unlock()
	var end turnEnd
	select {
	case end = <-s.waitTurn(ss, turn.ID):
	case <-s.ctx.Done():
		return acp.PromptResponse{}, &acp.RequestError{Code: codeInternal, Message: "agentpool acp is stopping; the turn goes on in the pool"}
	}
	return promptResponse(end)
}

// promptResponse maps the pool's turn end to the ACP answer: the ACP
// stop reasons pass; a turn that failed (an error, a deadline, a daemon
// restart) is an error saying why.
func promptResponse(end turnEnd) (acp.PromptResponse, error) {
	switch backends.StopReason(end.StopReason) {
	case backends.StopEndTurn, backends.StopMaxTokens, backends.StopMaxTurnRequests, backends.StopRefusal, backends.StopCancelled:
		return acp.PromptResponse{StopReason: acp.StopReason(end.StopReason)}, nil
	}
	msg := "the turn ended (" + end.StopReason + ")"
	if end.Error != "" {
		msg += ": " + end.Error
	}
	return acp.PromptResponse{}, &acp.RequestError{Code: codeInternal, Message: msg}
}

// Cancel cancels the session's running turn in the pool.
func (s *Server) Cancel(ctx context.Context, p acp.CancelNotification) error {
	ss, err := s.sessionOf(p.SessionId)
	if err != nil {
		s.logger.Debug("cancel of an unknown session", "session", p.SessionId)
		return nil
	}
	api, err := s.api(ctx)
	if err != nil {
		return err
	}
	if err := api.Cancel(context.WithoutCancel(ctx), ss.id); err != nil {
		s.logger.Debug("cancel", "session", ss.id, "err", err)
	}
	return nil
}

// promptText turns the prompt's content into the text the pool takes:
// text as is, a resource link as its URI, an embedded text resource as a
// fenced block under its URI.
func promptText(blocks []acp.ContentBlock) (string, error) {
	var b strings.Builder
	for _, c := range blocks {
		switch {
		case c.Text != nil:
			b.WriteString(c.Text.Text)
		case c.ResourceLink != nil:
			if b.Len() > 0 && !strings.HasSuffix(b.String(), " ") && !strings.HasSuffix(b.String(), "\n") {
				b.WriteByte(' ')
			}
			b.WriteString(c.ResourceLink.Uri)
			b.WriteByte(' ')
		case c.Resource != nil && c.Resource.Resource.TextResourceContents != nil:
			r := c.Resource.Resource.TextResourceContents
			fmt.Fprintf(&b, "\n\n%s:\n```\n%s\n```\n", r.Uri, strings.TrimSuffix(r.Text, "\n"))
		default:
			return "", invalid("this prompt holds content agentpool cannot pass to agents (images, audio or binary resources): send text, and files as links or text")
		}
	}
	text := strings.TrimSpace(b.String())
	if text == "" {
		return "", invalid("the prompt is empty")
	}
	return text, nil
}

// slashCommand splits "/name args" into name and args.
func slashCommand(text string) (name, args string, ok bool) {
	rest, ok := strings.CutPrefix(text, "/")
	if !ok || rest == "" {
		return "", "", false
	}
	name, args, _ = strings.Cut(rest, " ")
	return name, strings.TrimSpace(args), true
}

// command returns the pool's own command name, nil when there is none.
func (s *Server) command(name string) *Command {
	for i := range s.cfg.Commands {
		if s.cfg.Commands[i].Name == name {
			return &s.cfg.Commands[i]
		}
	}
	return nil
}

// runCommand runs one of the pool's commands and answers in the thread.
func (s *Server) runCommand(ctx context.Context, ss *session, c *Command, args string) (acp.PromptResponse, error) {
	out, err := c.Run(ctx, ss.id, args)
	if err != nil {
		if out != "" && !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		out += "/" + c.Name + " failed: " + err.Error()
	}
	if strings.TrimSpace(out) == "" {
		out = "/" + c.Name + ": done."
	}
	s.update(ss.id, acp.UpdateAgentMessageText(out))
	return acp.PromptResponse{StopReason: acp.StopReasonEndTurn}, nil
}
