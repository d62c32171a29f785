package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// handler is one tool's work, given the API of the call.
type handler[In any] func(ctx context.Context, req *mcp.CallToolRequest, api API, in In) (*mcp.CallToolResult, error)

// kind says what a tool does to the daemon's state, for the annotations
// clients use to decide what to ask their user about.
type kind int

const (
	readOnly    kind = iota // reads only
	additive                // creates or changes, destroys nothing
	destructive             // may destroy work or state (close, merge, cancel)
)

// addTool adds a tool whose input is In (its JSON schema inferred from the
// struct's json and jsonschema tags, one type per property). A required
// string field left empty is refused naming it, before the daemon is
// asked. Its errors become tool results marked as errors, carrying the
// daemon's message.
func addTool[In any](s *Server, name, title, desc string, k kind, h handler[In]) {
	ann := &mcp.ToolAnnotations{Title: title, ReadOnlyHint: k == readOnly, IdempotentHint: k == readOnly}
	ann.DestructiveHint = new(k == destructive)
	ann.OpenWorldHint = new(false)
	schema, err := inputSchema[In]()
	if err != nil {
		s.toolErrs = append(s.toolErrs, fmt.Errorf("tool %s: %w", name, err))
		return
	}
	mcp.AddTool(s.mcp, &mcp.Tool{Name: name, Title: title, Description: desc, Annotations: ann, InputSchema: schema},
		func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
			if msg := missingRequired(in); msg != "" {
				return failure(invalid("%s", msg)), nil, nil
			}
			api, err := s.api(ctx)
			if err == nil {
				var res *mcp.CallToolResult
				if res, err = h(ctx, req, api, in); err == nil {
					return res, nil, nil
				}
			}
			s.logger.Debug("tool failed", "tool", name, "err", err)
			return failure(err), nil, nil
		})
}

// result is a successful result: text for the model, and structured, if
// not nil, as its structured content.
func result(text string, structured any) *mcp.CallToolResult {
	r := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	if structured != nil {
		r.StructuredContent = structured
	}
	return r
}

// failure is the error result for err: the daemon's message for a refusal,
// a hint to start the daemon when it cannot be reached.
func failure(err error) *mcp.CallToolResult {
	r := &mcp.CallToolResult{}
	r.SetError(errors.New(errorText(err)))
	return r
}

// errorText says what went wrong in words a model can act on.
func errorText(err error) string {
	var ae *httpapi.Error
	switch {
	case errors.As(err, &ae):
		msg := "agentpool refused: " + ae.Message
		if ae.Field != "" {
			msg += " (field " + ae.Field + ")"
		}
		for _, d := range ae.Diagnostics {
			msg += "\n- " + d.Message
		}
		return msg + fmt.Sprintf(" [code %s, HTTP %d]", ae.Code, ae.Status)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "cannot reach the agentpool daemon (is it running? the user starts it with: agentpool serve): " + err.Error()
	}
	return err.Error()
}

// invalid is an error in a tool's arguments.
func invalid(format string, args ...any) error {
	return fmt.Errorf("invalid arguments: "+format, args...)
}

// clip returns s cut to at most max bytes (at a rune boundary), keeping
// the start, and whether it was cut.
func clip(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max], true
}

// tail returns s cut to at most max bytes keeping the end, and whether it
// was cut.
func tail(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	i := len(s) - max
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:], true
}

// oneLine squeezes s onto one line of at most max runes.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

// plural returns "1 file" or "n files".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
