package registry

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const (
	examplePath = "../providers.example.json"
	schemaPath  = "../providers.schema.json"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	sch, err := jsonschema.NewCompiler().Compile(schemaPath)
	if err != nil {
		t.Fatalf("Compile(%q) error = %v", schemaPath, err)
	}
	return sch
}

func validateAgainst(t *testing.T, sch *jsonschema.Schema, doc []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// builtinsDocument renders every built-in as a providers.json entry that
// spells out all of its settings.
func builtinsDocument(selfPath string) []byte {
	providers := make(map[string]any)
	for _, d := range builtins(selfPath) {
		e := map[string]any{"enabled": d.enabled, "label": d.label, "description": d.description, "command": d.command}
		if d.env != nil {
			e["env"] = d.env
		}
		if d.passEnv != nil {
			e["pass_env"] = d.passEnv
		}
		if d.permissions != nil {
			e["permissions"] = d.permissions
		}
		if d.mode != "" {
			e["mode"] = d.mode
		}
		if d.config != nil {
			e["config"] = d.config
		}
		if d.idleTimeout > 0 {
			e["idle_timeout"] = d.idleTimeout.String()
		}
		if d.turnTimeout > 0 {
			e["turn_timeout"] = d.turnTimeout.String()
		}
		switch d.kind {
		case backends.KindACP:
			e["compat"] = map[string]any{"missing_file_empty": d.compat.MissingFileEmpty, "no_cancel_request": d.compat.NoCancelRequest}
		case backends.KindPTY:
			p := d.pty
			for k, v := range map[string]any{"ready_pattern": p.ReadyPattern, "busy_pattern": p.BusyPattern, "cancel_keys": p.CancelKeys, "clear_keys": p.ClearKeys} {
				if v != "" {
					e[k] = v
				}
			}
			if p.QuietWindow > 0 {
				e["quiet_window"] = p.QuietWindow.String()
			}
			if p.Cols > 0 {
				e["cols"], e["rows"] = p.Cols, p.Rows
			}
			if p.ResumeArgs != nil {
				e["resume_args"] = p.ResumeArgs
			}
			if p.CancelMinInterval > 0 {
				e["cancel_min_interval"] = p.CancelMinInterval.String()
			}
			if p.IgnorePatterns != nil {
				e["ignore_patterns"] = p.IgnorePatterns
			}
		}
		sb := map[string]any{"enabled": d.sandbox.Enabled, "required": d.sandbox.Required}
		if d.sandbox.Read != nil {
			sb["read"] = d.sandbox.Read
		}
		if d.sandbox.Write != nil {
			sb["write"] = d.sandbox.Write
		}
		switch d.sandbox.Network {
		case backends.NetworkList:
			list := []any{}
			for _, p := range d.sandbox.Ports {
				list = append(list, p)
			}
			for _, h := range d.sandbox.Hosts {
				list = append(list, h)
			}
			sb["network"] = list
		case "":
		default:
			sb["network"] = d.sandbox.Network
		}
		e["sandbox"] = sb
		providers[d.id] = e
	}
	b, _ := json.MarshalIndent(map[string]any{"version": FileVersion, "providers": providers}, "", "  ")
	return b
}

func TestExampleLoads(t *testing.T) {
	data, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := parseDocument(examplePath, data, builtins("/bin/agentpool"))
	if err != nil {
		t.Fatalf("parseDocument(%q) error = %v; want nil", examplePath, err)
	}
	if d := defs["claude-sandbox"]; d == nil || d.env["IS_SANDBOX"] != "1" || d.enabled {
		t.Errorf("example claude-sandbox = %+v; want disabled with IS_SANDBOX=1", d)
	}
	if d := defs["claude"]; d.env["IS_SANDBOX"] != "" {
		t.Errorf("example claude env = %v; want IS_SANDBOX unset by default", d.env)
	}
	// The example shows each form of "network" and a required sandbox.
	var network = map[string]bool{}
	required := false
	for _, d := range defs {
		network[d.sandbox.Network] = true
		required = required || d.sandbox.Required && d.sandbox.Enabled
	}
	if !network[backends.NetworkNone] || !network[backends.NetworkList] || !required {
		t.Errorf("example sandboxes: networks %v, required %v; want \"none\", a port list and a required one", network, required)
	}

	// The example shows every field, every compat switch, every
	// permission action and every mode.
	root, _ := parseTree(data)
	seen := map[string]bool{}
	var walk func(n *node)
	walk = func(n *node) {
		for _, m := range n.members {
			seen[m.key] = true
			if m.key == "mode" {
				seen["mode="+m.val.str] = true
			}
			walk(m.val)
		}
	}
	walk(root)
	want := slices.Concat([]string{"$schema", "version", "providers", "mode=default", "mode=full"},
		entryFields(), compatFields(), permissionActions(), sandboxFields(), mcpFields(), budgetFields())
	for _, k := range want {
		if !seen[k] {
			t.Errorf("%s does not show %q", examplePath, k)
		}
	}
}

func TestSchemaAcceptsExampleAndBuiltins(t *testing.T) {
	sch := compileSchema(t)
	example, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := validateAgainst(t, sch, example); err != nil {
		t.Errorf("schema rejects %s: %v", examplePath, err)
	}
	doc := builtinsDocument("/usr/local/bin/agentpool")
	if err := validateAgainst(t, sch, doc); err != nil {
		t.Errorf("schema rejects the built-ins: %v\n%s", err, doc)
	}
	// The rendering is complete: loaded back, it changes nothing.
	defs, err := parseDocument("builtins", doc, builtins("/usr/local/bin/agentpool"))
	if err != nil {
		t.Fatalf("parseDocument(built-ins) error = %v", err)
	}
	for _, want := range builtins("/usr/local/bin/agentpool") {
		got := defs[want.id]
		got.inFile = false
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(definition{})); diff != "" {
			t.Errorf("built-in %q rendered and loaded back differs (-want +got):\n%s", want.id, diff)
		}
	}
}

// TestSchemaAgreesWithLoader keeps the schema and the loader in step on
// what each can express.
func TestSchemaAgreesWithLoader(t *testing.T) {
	sch := compileSchema(t)
	tests := []struct {
		name  string
		doc   string
		valid bool
	}{
		{"minimal", `{"version": 1}`, true},
		{"daemon mcp servers", `{"version": 1, "mcp_servers": {"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}}}`, true},
		{"daemon mcp servers not an object", `{"version": 1, "mcp_servers": []}`, false},
		{"mcp shared false", `{"version": 1, "providers": {"codex": {"mcp_servers": {"git": {"command": "mcp-git", "shared": false}}}}}`, true},
		{"mcp shared sandbox", `{"version": 1, "providers": {"codex": {"mcp_servers": {"m": {"command": "mcp-m", "sandbox": {"network": "none", "write": ["~/.m"]}}}}}}`, true},
		{"mcp shared not bool", `{"version": 1, "providers": {"codex": {"mcp_servers": {"m": {"command": "mcp-m", "shared": "yes"}}}}}`, false},
		{"mcp shared on http", `{"version": 1, "providers": {"codex": {"mcp_servers": {"h": {"type": "http", "url": "http://x", "shared": true}}}}}`, false},
		{"mcp sandbox on http", `{"version": 1, "providers": {"codex": {"mcp_servers": {"h": {"type": "http", "url": "http://x", "sandbox": {}}}}}}`, false},
		{"schema key", `{"$schema": "./providers.schema.json", "version": 1, "providers": {}}`, true},
		{"override", `{"version": 1, "providers": {"gemini": {"enabled": false, "env": {"A": "b"}}}}`, true},
		{"new acp", `{"version": 1, "providers": {"amp": {"extends": "acp", "command": ["amp-acp"]}}}`, true},
		{"new pty", `{"version": 1, "providers": {"t": {"extends": "pty", "command": ["t"], "cols": 80, "rows": 24}}}`, true},
		{"extends built-in", `{"version": 1, "providers": {"c2": {"extends": "claude", "mode": "full"}}}`, true},
		{"all permissions", `{"version": 1, "providers": {"codex": {"permissions": {"fs.read": "allow", "terminal": "deny", "switch_mode": "ask"}}}}`, true},
		{"durations", `{"version": 1, "providers": {"aider": {"quiet_window": "1.5s", "idle_timeout": "1h30m"}}}`, true},
		{"config defaults", `{"version": 1, "providers": {"codex": {"config": {"model": "o3", "mode": "plan"}}}}`, true},
		{"config on a pty provider", `{"version": 1, "providers": {"t": {"extends": "pty", "command": ["t"], "config": {"model": "x"}}}}`, false},
		{"config value not a string", `{"version": 1, "providers": {"codex": {"config": {"model": 3}}}}`, false},
		{"config on pty built-in", `{"version": 1, "providers": {"aider": {"config": {"model": "x"}}}}`, false},
		{"config value empty", `{"version": 1, "providers": {"codex": {"config": {"model": ""}}}}`, false},
		{"busy pattern", `{"version": 1, "providers": {"t": {"extends": "pty", "command": ["t"], "busy_pattern": "(?i)working"}}}`, true},
		{"busy pattern on acp", `{"version": 1, "providers": {"claude": {"busy_pattern": "x"}}}`, false},
		{"busy pattern on new acp", `{"version": 1, "providers": {"amp": {"extends": "acp", "command": ["a"], "busy_pattern": "x"}}}`, false},
		{"missing version", `{"providers": {}}`, false},
		{"version 2", `{"version": 2}`, false},
		{"unknown top field", `{"version": 1, "extra": true}`, false},
		{"unknown field", `{"version": 1, "providers": {"claude": {"enabeld": true}}}`, false},
		{"wrong type", `{"version": 1, "providers": {"claude": {"enabled": "yes"}}}`, false},
		{"null", `{"version": 1, "providers": {"claude": {"label": null}}}`, false},
		{"bad id", `{"version": 1, "providers": {"Bad": {"extends": "acp", "command": ["x"]}}}`, false},
		{"reserved id", `{"version": 1, "providers": {"pty": {"extends": "pty", "command": ["x"]}}}`, false},
		{"no extends", `{"version": 1, "providers": {"amp": {"command": ["amp-acp"]}}}`, false},
		{"extends on built-in", `{"version": 1, "providers": {"claude": {"extends": "acp"}}}`, false},
		{"new acp without command", `{"version": 1, "providers": {"amp": {"extends": "acp"}}}`, false},
		{"pty field on acp built-in", `{"version": 1, "providers": {"claude": {"cols": 80}}}`, false},
		{"pty field on new acp", `{"version": 1, "providers": {"amp": {"extends": "acp", "command": ["a"], "rows": 30}}}`, false},
		{"compat on pty built-in", `{"version": 1, "providers": {"aider": {"compat": {}}}}`, false},
		{"compat on new pty", `{"version": 1, "providers": {"t": {"extends": "pty", "command": ["t"], "compat": {}}}}`, false},
		{"empty command", `{"version": 1, "providers": {"codex": {"command": []}}}`, false},
		{"empty program", `{"version": 1, "providers": {"codex": {"command": [""]}}}`, false},
		{"env name", `{"version": 1, "providers": {"codex": {"env": {"A=B": "x"}}}}`, false},
		{"pass_env", `{"version": 1, "providers": {"codex": {"pass_env": ["OPENAI_API_KEY", "AZURE_*", "_X1"]}}}`, true},
		{"pass_env empty", `{"version": 1, "providers": {"aider": {"pass_env": []}}}`, true},
		{"pass_env on new", `{"version": 1, "providers": {"t": {"extends": "pty", "command": ["t"], "pass_env": ["T_KEY"]}}}`, true},
		{"pass_env proxy", `{"version": 1, "providers": {"codex": {"pass_env": ["HTTPS_PROXY"]}}}`, true},
		{"pass_env star", `{"version": 1, "providers": {"codex": {"pass_env": ["*"]}}}`, false},
		{"pass_env empty name", `{"version": 1, "providers": {"codex": {"pass_env": [""]}}}`, false},
		{"pass_env digit", `{"version": 1, "providers": {"codex": {"pass_env": ["1KEY"]}}}`, false},
		{"pass_env inner star", `{"version": 1, "providers": {"codex": {"pass_env": ["A*B"]}}}`, false},
		{"pass_env dash", `{"version": 1, "providers": {"codex": {"pass_env": ["MY-KEY"]}}}`, false},
		{"pass_env daemon", `{"version": 1, "providers": {"codex": {"pass_env": ["AGENTPOOL_TOKEN"]}}}`, false},
		{"pass_env daemon prefix", `{"version": 1, "providers": {"codex": {"pass_env": ["AGENTPOOL_*"]}}}`, false},
		{"pass_env socket", `{"version": 1, "providers": {"codex": {"pass_env": ["SSH_AUTH_SOCK"]}}}`, false},
		{"pass_env string", `{"version": 1, "providers": {"codex": {"pass_env": "OPENAI_API_KEY"}}}`, false},
		{"pass_env null", `{"version": 1, "providers": {"codex": {"pass_env": null}}}`, false},
		{"unknown action", `{"version": 1, "providers": {"codex": {"permissions": {"exec": "ask"}}}}`, false},
		{"unknown decision", `{"version": 1, "providers": {"codex": {"permissions": {"edit": "maybe"}}}}`, false},
		{"mode", `{"version": 1, "providers": {"codex": {"mode": "yolo"}}}`, false},
		{"duration", `{"version": 1, "providers": {"codex": {"turn_timeout": "10 minutes"}}}`, false},
		{"cols range", `{"version": 1, "providers": {"aider": {"cols": 10}}}`, false},
		{"rows integer", `{"version": 1, "providers": {"aider": {"rows": 2.5}}}`, false},
		{"blank label", `{"version": 1, "providers": {"codex": {"label": "   "}}}`, false},
		{"compat field", `{"version": 1, "providers": {"gemini": {"compat": {"x": true}}}}`, false},
		{"sandbox all fields", `{"version": 1, "providers": {"codex": {"sandbox": {"enabled": true, "read": ["/opt", "~/data", "$WORKTREE/x"], "write": ["$WORKTREE"], "network": [443, 8443], "required": true}}}}`, true},
		{"sandbox on pty", `{"version": 1, "providers": {"aider": {"sandbox": {"network": "none"}}}}`, true},
		{"sandbox on new", `{"version": 1, "providers": {"t": {"extends": "pty", "command": ["t"], "sandbox": {"enabled": false}}}}`, true},
		{"sandbox empty lists", `{"version": 1, "providers": {"codex": {"sandbox": {"read": [], "write": []}}}}`, true},
		{"sandbox network all", `{"version": 1, "providers": {"codex": {"sandbox": {"network": "all"}}}}`, true},
		{"sandbox duplicate ports", `{"version": 1, "providers": {"codex": {"sandbox": {"network": [443, 443]}}}}`, true},
		{"sandbox unknown field", `{"version": 1, "providers": {"codex": {"sandbox": {"deny": []}}}}`, false},
		{"sandbox relative", `{"version": 1, "providers": {"codex": {"sandbox": {"read": ["opt"]}}}}`, false},
		{"sandbox dotdot", `{"version": 1, "providers": {"codex": {"sandbox": {"read": ["/opt/../etc"]}}}}`, false},
		{"sandbox dotdot end", `{"version": 1, "providers": {"codex": {"sandbox": {"read": ["$WORKTREE/.."]}}}}`, false},
		{"sandbox empty path", `{"version": 1, "providers": {"codex": {"sandbox": {"write": [""]}}}}`, false},
		{"sandbox variable", `{"version": 1, "providers": {"codex": {"sandbox": {"write": ["$HOME/x"]}}}}`, false},
		{"sandbox inner dollar", `{"version": 1, "providers": {"codex": {"sandbox": {"write": ["/opt/$X"]}}}}`, false},
		{"sandbox tilde user", `{"version": 1, "providers": {"codex": {"sandbox": {"write": ["~root/x"]}}}}`, false},
		{"sandbox whole home", `{"version": 1, "providers": {"codex": {"sandbox": {"write": ["~/"]}}}}`, false},
		{"sandbox NUL", `{"version": 1, "providers": {"codex": {"sandbox": {"write": ["/a\u0000"]}}}}`, false},
		{"sandbox network hosts", `{"version": 1, "providers": {"codex": {"sandbox": {"network": [443, "api.openai.com", "*.openai.com:443", "localhost:11434", "10.0.0.5:8080", "[::1]:8080", "::1", "10.0.0.0/8", "10.0.0.0/8:5432", "fd00::/8", "[fd00::/8]:5432"]}}}}`, true},
		{"sandbox network url", `{"version": 1, "providers": {"codex": {"sandbox": {"network": ["https://api.openai.com"]}}}}`, false},
		{"sandbox network space", `{"version": 1, "providers": {"codex": {"sandbox": {"network": ["api.openai.com 443"]}}}}`, false},
		{"sandbox network empty host", `{"version": 1, "providers": {"codex": {"sandbox": {"network": [""]}}}}`, false},
		{"sandbox network boolean", `{"version": 1, "providers": {"codex": {"sandbox": {"network": [true]}}}}`, false},
		{"sandbox network word", `{"version": 1, "providers": {"codex": {"sandbox": {"network": "ports"}}}}`, false},
		{"sandbox no ports", `{"version": 1, "providers": {"codex": {"sandbox": {"network": []}}}}`, false},
		{"sandbox port 0", `{"version": 1, "providers": {"codex": {"sandbox": {"network": [0]}}}}`, false},
		{"sandbox port 65536", `{"version": 1, "providers": {"codex": {"sandbox": {"network": [65536]}}}}`, false},
		{"sandbox port fraction", `{"version": 1, "providers": {"codex": {"sandbox": {"network": [1.5]}}}}`, false},
		{"sandbox null", `{"version": 1, "providers": {"codex": {"sandbox": null}}}`, false},
		{"mcp stdio", `{"version": 1, "providers": {"codex": {"mcp_servers": {"fs": {"command": "mcp-fs", "args": ["."], "env": {"T": "x"}}}}}}`, true},
		{"mcp stdio type", `{"version": 1, "providers": {"codex": {"mcp_servers": {"fs": {"type": "stdio", "command": "mcp-fs"}}}}}`, true},
		{"mcp http", `{"version": 1, "providers": {"codex": {"mcp_servers": {"gh": {"type": "http", "url": "https://x/mcp", "headers": {"Authorization": "Bearer t"}}}}}}`, true},
		{"mcp sse", `{"version": 1, "providers": {"amp": {"extends": "acp", "command": ["a"], "mcp_servers": {"s": {"type": "sse", "url": "http://127.0.0.1:1/sse"}}}}}`, true},
		{"mcp empty", `{"version": 1, "providers": {"codex": {"mcp_servers": {}}}}`, true},
		{"mcp on pty built-in", `{"version": 1, "providers": {"aider": {"mcp_servers": {"fs": {"command": "x"}}}}}`, false},
		{"mcp on new pty", `{"version": 1, "providers": {"t": {"extends": "pty", "command": ["t"], "mcp_servers": {}}}}`, false},
		{"mcp no command", `{"version": 1, "providers": {"codex": {"mcp_servers": {"fs": {"args": ["x"]}}}}}`, false},
		{"mcp blank command", `{"version": 1, "providers": {"codex": {"mcp_servers": {"fs": {"command": "  "}}}}}`, false},
		{"mcp http no url", `{"version": 1, "providers": {"codex": {"mcp_servers": {"gh": {"type": "http"}}}}}`, false},
		{"mcp http bad url", `{"version": 1, "providers": {"codex": {"mcp_servers": {"gh": {"type": "http", "url": "ftp://x"}}}}}`, false},
		{"mcp http with command", `{"version": 1, "providers": {"codex": {"mcp_servers": {"gh": {"type": "http", "url": "https://x", "command": "c"}}}}}`, false},
		{"mcp http with env", `{"version": 1, "providers": {"codex": {"mcp_servers": {"gh": {"type": "http", "url": "https://x", "env": {}}}}}}`, false},
		{"mcp stdio with url", `{"version": 1, "providers": {"codex": {"mcp_servers": {"fs": {"command": "c", "url": "https://x"}}}}}`, false},
		{"mcp stdio with headers", `{"version": 1, "providers": {"codex": {"mcp_servers": {"fs": {"command": "c", "headers": {}}}}}}`, false},
		{"mcp unknown type", `{"version": 1, "providers": {"codex": {"mcp_servers": {"x": {"type": "ws", "url": "https://x"}}}}}`, false},
		{"mcp unknown field", `{"version": 1, "providers": {"codex": {"mcp_servers": {"fs": {"command": "c", "cwd": "/"}}}}}`, false},
		{"mcp env value type", `{"version": 1, "providers": {"codex": {"mcp_servers": {"fs": {"command": "c", "env": {"A": 1}}}}}}`, false},
		{"mcp env name", `{"version": 1, "providers": {"codex": {"mcp_servers": {"fs": {"command": "c", "env": {"A=B": "x"}}}}}}`, false},
		{"mcp header name", `{"version": 1, "providers": {"codex": {"mcp_servers": {"gh": {"type": "http", "url": "https://x", "headers": {"Bad Name": "x"}}}}}}`, false},
		{"mcp header newline", `{"version": 1, "providers": {"codex": {"mcp_servers": {"gh": {"type": "http", "url": "https://x", "headers": {"A": "x\r\nB: y"}}}}}}`, false},
		{"mcp empty name", `{"version": 1, "providers": {"codex": {"mcp_servers": {"": {"command": "c"}}}}}`, false},
		{"mcp list", `{"version": 1, "providers": {"codex": {"mcp_servers": [{"name": "fs", "command": "c"}]}}}`, false},
		{"mcp null server", `{"version": 1, "providers": {"codex": {"mcp_servers": {"fs": null}}}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, loadErr := parseDocument("p.json", []byte(tt.doc), builtins("/bin/agentpool"))
			schemaErr := validateAgainst(t, sch, []byte(tt.doc))
			if (loadErr == nil) != tt.valid || (schemaErr == nil) != tt.valid {
				t.Errorf("%s: loader error = %v, schema error = %v; want valid = %v", tt.doc, loadErr, schemaErr, tt.valid)
			}
		})
	}
}
