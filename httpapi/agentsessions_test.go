package httpapi

import (
	"context"
	"fmt"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/registry"
)

func TestAgentSessionsEndpoint(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	none := newTestEnv(t, fp, nil)
	none.check(t, []apiCall{
		{name: "no lister", method: "GET", path: "/v1/providers/demo/sessions?repo=/src/app", status: 409, code: CodeUnsupported},
	})
	e := newTestEnv(t, fp, func(c *Config) {
		c.AgentSessions = func(_ context.Context, provider, repo string) ([]backends.AgentSession, error) {
			switch provider {
			case "demo":
				return []backends.AgentSession{{ID: "own-1", Cwd: repo, Title: "fix it"}}, nil
			case "nolist":
				return nil, fmt.Errorf("list: %w", backends.ErrUnsupported)
			case "nope":
				return nil, fmt.Errorf("list: %w", registry.ErrUnknown)
			}
			return nil, fmt.Errorf("agent crashed")
		}
	})
	e.check(t, []apiCall{
		{name: "list", method: "GET", path: "/v1/providers/demo/sessions?repo=/src/app", status: 200, want: `"sessions":[{"id":"own-1","cwd":"/src/app","title":"fix it"}]`},
		{name: "relative repo", method: "GET", path: "/v1/providers/demo/sessions?repo=src", status: 400, code: CodeBadRequest, field: "repo"},
		{name: "cannot list", method: "GET", path: "/v1/providers/nolist/sessions", status: 409, code: CodeUnsupported, want: "session/list"},
		{name: "unknown", method: "GET", path: "/v1/providers/nope/sessions", status: 404, code: CodeUnknownProvider},
		{name: "agent fails", method: "GET", path: "/v1/providers/boom/sessions", status: 502, code: CodeProbeFailed, want: "agent crashed"},
	})
}
