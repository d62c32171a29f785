package registry

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentpool/agentpool/backends"
)

const mcpDoc = `{
  "version": 1,
  "providers": {
    "codex": {"mcp_servers": {
      "files": {"command": "mcp-files", "args": ["."], "env": {"FILES_TOKEN": "s3cret-files"}},
      "github": {"type": "http", "url": "https://mcp.example/gh", "headers": {"Authorization": "Bearer s3cret-gh"}}
    }},
    "codex-2": {"extends": "codex", "mcp_servers": {
      "github": {"type": "sse", "url": "https://mcp.example/sse"},
      "docs": {"command": "mcp-docs"}
    }}
  }
}
`

// The launch spec carries the servers with their secrets; a provider
// extending another gets the base's servers, its own replacing by name.
func TestMCPServersInSpec(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	f.write(t, mcpDoc)
	r := open(t, f.config())
	spec, err := r.Resolve("codex")
	if err != nil {
		t.Fatal(err)
	}
	want := backends.MCPServers{
		"files":  {Command: "mcp-files", Args: []string{"."}, Env: map[string]string{"FILES_TOKEN": "s3cret-files"}},
		"github": {Type: "http", URL: "https://mcp.example/gh", Headers: map[string]string{"Authorization": "Bearer s3cret-gh"}},
	}
	if diff := cmp.Diff(want, spec.MCPServers); diff != "" {
		t.Errorf("codex spec servers (-want +got):\n%s", diff)
	}
	spec2, err := r.Resolve("codex-2")
	if err != nil {
		t.Fatal(err)
	}
	want2 := backends.MCPServers{
		"files":  want["files"],
		"github": {Type: "sse", URL: "https://mcp.example/sse"},
		"docs":   {Command: "mcp-docs"},
	}
	if diff := cmp.Diff(want2, spec2.MCPServers); diff != "" {
		t.Errorf("codex-2 spec servers (-want +got):\n%s", diff)
	}
}

// The provider status shows each server, its transport and the names of
// its variables and headers, never their values.
func TestMCPServersRedactedInStatus(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	f.write(t, mcpDoc)
	r := open(t, f.config())
	raw, err := json.Marshal(r.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cret-files", "s3cret-gh"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("snapshot shows %q", secret)
		}
	}
	p, _ := r.Snapshot().Provider("codex")
	want := backends.MCPServers{
		"files":  {Type: "stdio", Command: "mcp-files", Args: []string{"."}, Env: map[string]string{"FILES_TOKEN": backends.Redacted}},
		"github": {Type: "http", URL: "https://mcp.example/gh", Headers: map[string]string{"Authorization": backends.Redacted}},
	}
	if diff := cmp.Diff(want, p.MCPServers); diff != "" {
		t.Errorf("codex status servers (-want +got):\n%s", diff)
	}
}

// A merge patch that does not mention a secret keeps it: the patch
// applies to the file, not to the redacted view.
func TestMCPPatchKeepsSecrets(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	f.write(t, mcpDoc)
	r := open(t, f.config())
	ctx := context.Background()
	if _, err := r.Patch(ctx, "codex", []byte(`{"mcp_servers": {"files": {"args": ["--root", "/srv"]}, "github": {"url": "https://mcp.example/gh2"}}}`), ""); err != nil {
		t.Fatal(err)
	}
	spec, err := r.Resolve("codex")
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.MCPServers["files"]; got.Env["FILES_TOKEN"] != "s3cret-files" || len(got.Args) != 2 {
		t.Errorf("files after patch = %+v; want new args, secret kept", got)
	}
	if got := spec.MCPServers["github"]; got.Headers["Authorization"] != "Bearer s3cret-gh" || got.URL != "https://mcp.example/gh2" {
		t.Errorf("github after patch = %+v; want new url, secret kept", got)
	}
	// null removes one server, the other stays.
	if _, err := r.Patch(ctx, "codex", []byte(`{"mcp_servers": {"github": null}}`), ""); err != nil {
		t.Fatal(err)
	}
	spec, _ = r.Resolve("codex")
	if got := spec.MCPServers.Names(); len(got) != 1 || got[0] != "files" {
		t.Errorf("servers after removing github = %v", got)
	}
}

// Top-level servers reach every ACP provider's agents, a provider's own
// server replacing the daemon's of its name.
func TestDaemonMCPServers(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	f.write(t, `{
  "version": 1,
  "mcp_servers": {
    "memory": {"command": "mcp-memory"},
    "docs": {"command": "mcp-docs", "args": ["/srv/docs"], "sandbox": {"network": "none"}}
  },
  "providers": {"codex": {"mcp_servers": {"docs": {"command": "codex-docs", "shared": false}}}}
}
`)
	r := open(t, f.config())
	spec, err := r.Resolve("codex")
	if err != nil {
		t.Fatal(err)
	}
	no := false
	want := backends.MCPServers{
		"memory": {Command: "mcp-memory"},
		"docs":   {Command: "codex-docs", Shared: &no},
	}
	if diff := cmp.Diff(want, spec.MCPServers); diff != "" {
		t.Errorf("codex servers (-want +got):\n%s", diff)
	}
}
