package backends

import (
	"strings"
	"testing"
)

// Redact hides every value and changes nothing of the original; Merge
// lets the second set win by name and shares nothing with either.
func TestMCPServersRedactAndMerge(t *testing.T) {
	base := MCPServers{
		"a": {Command: "x", Env: map[string]string{"K": "secret-a"}},
		"b": {Type: MCPHTTP, URL: "https://b", Headers: map[string]string{"H": "secret-b"}},
	}
	r := base.Redact()
	if r["a"].Env["K"] != Redacted || r["b"].Headers["H"] != Redacted || r["a"].Type != MCPStdio {
		t.Errorf("Redact() = %+v", r)
	}
	if base["a"].Env["K"] != "secret-a" || base["b"].Headers["H"] != "secret-b" || base["a"].Type != "" {
		t.Errorf("Redact changed the original: %+v", base)
	}
	m := base.Merge(MCPServers{"a": {Command: "y"}})
	if m["a"].Command != "y" || m["a"].Env != nil || m["b"].URL != "https://b" {
		t.Errorf("Merge() = %+v", m)
	}
	m["b"].Headers["H"] = "changed"
	if base["b"].Headers["H"] != "secret-b" {
		t.Error("Merge shares its maps with its input")
	}
	if got := base.Secrets(); len(got) != 2 {
		t.Errorf("Secrets() = %v", got)
	}
	if MCPServers(nil).Merge(nil) != nil {
		t.Error("Merge of nothing is not nil")
	}
}

func TestMCPServersValidate(t *testing.T) {
	for _, tc := range []struct {
		s    MCPServers
		want string
	}{
		{MCPServers{"a": {Command: "x", Args: []string{"-v"}, Env: map[string]string{"K": "v"}}}, ""},
		{MCPServers{"a": {Type: MCPSSE, URL: "http://127.0.0.1:1/sse"}}, ""},
		{MCPServers{"a": {}}, "mcp_servers.a.command"},
		{MCPServers{"a": {Type: "ws", URL: "https://x"}}, "mcp_servers.a.type"},
		{MCPServers{"a": {Type: MCPHTTP, URL: "https://x", Headers: map[string]string{"A B": "v"}}}, "mcp_servers.a.headers"},
		{MCPServers{"a": {Command: "x", Env: map[string]string{"K": Redacted}}}, "mcp_servers.a.env.K"},
		{MCPServers{"": {Command: "x"}}, "mcp_servers.: a server name must not be empty"},
		{MCPServers{"a\n": {Command: "x"}}, "control character"},
	} {
		err := tc.s.Validate("mcp_servers")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Validate(%+v) = %v; want nil", tc.s, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Validate(%+v) = %v; want %q", tc.s, err, tc.want)
		}
	}
}
