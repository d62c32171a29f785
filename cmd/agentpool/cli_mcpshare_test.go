package main

import (
	"encoding/json"
	"testing"

	"github.com/agentpool/agentpool/backends"
)

func TestMCPSummarySaysShared(t *testing.T) {
	d := backends.MCPData{Method: "session/new", Servers: []string{"files", "memory"}, Sharing: []backends.MCPSharing{
		{Name: "files", Reason: `args[0] "." is a relative path: the server works on the session's files`},
		{Name: "memory", Shared: true, Via: "relay"}}}
	raw, _ := json.Marshal(d)
	got := mcpSummary(backends.Event{Type: backends.EventMCP, Data: raw})
	want := `MCP servers files, memory (shared: memory via relay; own copy: files — args[0] "." is a relative path: the server works on the session's files)`
	if got != want {
		t.Errorf("mcpSummary = %q; want %q", got, want)
	}
}
