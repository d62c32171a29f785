package acp_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// mcpFixture is a set of servers of each transport, with secrets.
func mcpFixture() backends.MCPServers {
	return backends.MCPServers{
		"files":  {Command: "/opt/mcp/files", Args: []string{"--root", "."}, Env: map[string]string{"FILES_TOKEN": "s3cret-files-token"}},
		"github": {Type: backends.MCPHTTP, URL: "https://mcp.example/gh", Headers: map[string]string{"Authorization": "Bearer s3cret-gh"}},
		"events": {Type: backends.MCPSSE, URL: "http://127.0.0.1:9/sse", Headers: map[string]string{"X-Key": "s3cret-sse"}},
	}
}

// echoed runs a turn whose agent echoes the MCP servers it received.
func echoed(t *testing.T, h *harness) []agenttest.MCPReceived {
	t.Helper()
	before := len(h.turn.texts(backends.RoleAgent))
	if _, err := h.prompt(t, "which servers?"); err != nil {
		t.Fatal(err)
	}
	texts := h.turn.texts(backends.RoleAgent)[before:]
	for _, tx := range texts {
		if got, err := agenttest.ParseMCPEcho(tx); err == nil {
			return got
		}
	}
	t.Fatalf("no MCP echo among %q", texts)
	return nil
}

// The agent gets the spec's servers in session/new, with their arguments,
// environment and headers; the http one only because the agent takes http,
// the sse one not, with an mcp event that names them and says why.
func TestMCPServersPassedInSessionNew(t *testing.T) {
	s := agenttest.Script{MCPHTTP: true, Turns: []agenttest.Turn{{Steps: []agenttest.Step{{MCPEcho: true}}}}}
	h := newBackend(t, s, acp.Config{Spec: backends.Spec{MCPServers: mcpFixture()}})
	info := h.start(t, "")
	if want := []string{"files", "github"}; !slices.Equal(info.MCPServers, want) {
		t.Errorf("Info.MCPServers = %v, want %v", info.MCPServers, want)
	}
	if len(info.MCPSkipped) != 1 || info.MCPSkipped[0].Name != "events" || info.MCPSkipped[0].Transport != "sse" {
		t.Errorf("Info.MCPSkipped = %+v, want events (sse)", info.MCPSkipped)
	}
	got := echoed(t, h)
	want := []agenttest.MCPReceived{
		{Method: "session/new", Name: "files", Command: "/opt/mcp/files", Args: []string{"--root", "."},
			Env: map[string]string{"FILES_TOKEN": agenttest.MCPDigest("s3cret-files-token")}},
		{Method: "session/new", Name: "github", Type: "http", URL: "https://mcp.example/gh",
			Headers: map[string]string{"Authorization": agenttest.MCPDigest("Bearer s3cret-gh")}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("agent received %+v\nwant %+v", got, want)
	}
	ev := h.outside.waitType(t, backends.EventMCP)
	var data backends.MCPData
	if err := json.Unmarshal(ev.Data, &data); err != nil {
		t.Fatal(err)
	}
	if data.Method != "session/new" || !slices.Equal(data.Servers, []string{"files", "github"}) ||
		len(data.Skipped) != 1 || data.Skipped[0].Name != "events" || data.Skipped[0].Reason == "" {
		t.Errorf("mcp event = %s", ev.Data)
	}
	for _, secret := range mcpFixture().Secrets() {
		if bytes.Contains(ev.Data, []byte(secret)) {
			t.Errorf("mcp event shows the secret %q: %s", secret, ev.Data)
		}
	}
}

// An agent without mcpCapabilities gets only the stdio servers.
func TestMCPServersHTTPNeedsCapability(t *testing.T) {
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{MCPEcho: true}}}}}
	h := newBackend(t, s, acp.Config{Spec: backends.Spec{MCPServers: mcpFixture()}})
	info := h.start(t, "")
	if !slices.Equal(info.MCPServers, []string{"files"}) {
		t.Errorf("Info.MCPServers = %v, want [files]", info.MCPServers)
	}
	var skipped []string
	for _, sk := range info.MCPSkipped {
		skipped = append(skipped, sk.Name+"/"+sk.Transport)
	}
	if !slices.Equal(skipped, []string{"events/sse", "github/http"}) {
		t.Errorf("skipped %v, want events/sse and github/http", skipped)
	}
	got := echoed(t, h)
	if len(got) != 1 || got[0].Name != "files" {
		t.Errorf("agent received %+v, want only files", got)
	}
}

// A resumed session gets the servers again in session/load.
func TestMCPServersPassedInSessionLoad(t *testing.T) {
	s := agenttest.Script{LoadSession: true, MCPHTTP: true, MCPSSE: true, Turns: []agenttest.Turn{{Steps: []agenttest.Step{{MCPEcho: true}}}}}
	h := newBackend(t, s, acp.Config{Spec: backends.Spec{MCPServers: mcpFixture()}})
	info := h.start(t, "earlier-session")
	if !info.Resumed {
		t.Fatalf("not resumed: %+v", info)
	}
	got := echoed(t, h)
	var names []string
	for _, r := range got {
		if r.Method != "session/load" {
			t.Errorf("%s came with %s, want session/load", r.Name, r.Method)
		}
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"events", "files", "github"}) {
		t.Errorf("agent received %v", names)
	}
}

// The wire, as AGENTPOOL_DEBUG_WIRE prints it, never shows a secret value,
// neither in session/new nor when the agent repeats it.
func TestMCPSecretsRedactedOnTheWire(t *testing.T) {
	var mu sync.Mutex
	var lines [][]byte
	wire := func(_ bool, l []byte) {
		mu.Lock()
		lines = append(lines, append([]byte(nil), l...))
		mu.Unlock()
	}
	s := agenttest.Script{MCPHTTP: true, MCPSSE: true, Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{Chunk: "your token is s3cret-files-token"}}}}}
	h := newBackend(t, s, acp.Config{Spec: backends.Spec{MCPServers: mcpFixture()}, Wire: wire})
	h.start(t, "")
	if _, err := h.prompt(t, "hi"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	sawNew := false
	for _, l := range lines {
		for _, secret := range mcpFixture().Secrets() {
			if bytes.Contains(l, []byte(secret)) {
				t.Errorf("wire line shows %q: %s", secret, l)
			}
		}
		if bytes.Contains(l, []byte(`"session/new"`)) {
			sawNew = true
			if !bytes.Contains(l, []byte(`"FILES_TOKEN","value":"`+backends.Redacted+`"`)) {
				t.Errorf("session/new on the wire lacks the redacted env value: %s", l)
			}
		}
	}
	if !sawNew {
		t.Error("no session/new on the wire")
	}
}

// An agent that takes session/resume gets the servers again there.
func TestMCPServersPassedInSessionResume(t *testing.T) {
	s := agenttest.Script{ResumeSession: true, LoadSession: true, Turns: []agenttest.Turn{{Steps: []agenttest.Step{{MCPEcho: true}}}}}
	h := newBackend(t, s, acp.Config{Spec: backends.Spec{MCPServers: mcpFixture()}})
	info := h.start(t, "earlier-session")
	if !info.Resumed || !slices.Equal(info.MCPServers, []string{"files"}) {
		t.Fatalf("info %+v; want resumed with files", info)
	}
	got := echoed(t, h)
	if len(got) != 1 || got[0].Name != "files" || got[0].Method != "session/resume" ||
		got[0].Env["FILES_TOKEN"] != agenttest.MCPDigest("s3cret-files-token") {
		t.Errorf("agent received %+v; want files in session/resume", got)
	}
	ev := h.outside.waitType(t, backends.EventMCP)
	if !bytes.Contains(ev.Data, []byte(`"method":"session/resume"`)) {
		t.Errorf("mcp event %s; want session/resume", ev.Data)
	}
}
