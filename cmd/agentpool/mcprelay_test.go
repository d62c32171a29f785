package main

import (
	"bytes"
	"strings"
	"testing"
)

// mcp-relay refuses to send its credential anywhere but loopback, and
// says where the credential is missing from.
func TestMCPRelayRefuses(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		token string
		want  string
	}{
		{[]string{"http://example.com:8080/mcp/x"}, "t", "refusing to send the credential elsewhere"},
		{[]string{"https://127.0.0.1:1/mcp/x"}, "t", "want the daemon's http:// URL on loopback"},
		{[]string{"http://127.0.0.1:1/mcp/x"}, "", "no credential in $AGENTPOOL_MCP_TOKEN"},
	} {
		t.Setenv("AGENTPOOL_MCP_TOKEN", tc.token)
		var out, errOut bytes.Buffer
		err := run(t.Context(), append([]string{"mcp-relay"}, tc.args...), strings.NewReader(""), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mcp-relay %v = %v; want an error saying %q", tc.args, err, tc.want)
		}
		if out.Len() != 0 {
			t.Errorf("mcp-relay %v wrote %q to stdout, the protocol stream", tc.args, out.String())
		}
	}
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"mcp-relay"}, strings.NewReader(""), &out, &errOut); err == nil || !strings.Contains(errOut.String(), "Usage: agentpool mcp-relay URL") {
		t.Errorf("mcp-relay without a URL = %v, %q; want the usage", err, errOut.String())
	}
}
