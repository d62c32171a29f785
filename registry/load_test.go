package registry

import (
	"errors"
	"strings"
	"testing"
)

// position returns the 1-based line and column (in characters) where the
// n-th (from 0) occurrence of marker starts in doc.
func position(t *testing.T, doc, marker string, n int) (int, int) {
	t.Helper()
	off := -1
	for i := 0; i <= n; i++ {
		j := strings.Index(doc[off+1:], marker)
		if j < 0 {
			t.Fatalf("marker %q (#%d) not in document", marker, n)
		}
		off += 1 + j
	}
	lines := strings.Split(doc[:off], "\n")
	return len(lines), len([]rune(lines[len(lines)-1])) + 1
}

func TestParseDocumentRejects(t *testing.T) {
	doc := func(providers string) string {
		return "{\n  \"version\": 1,\n  \"providers\": {\n    " + providers + "\n  }\n}\n"
	}
	tests := []struct {
		name string
		doc  string
		path string // of the first diagnostic
		at   string // marker where it points; "" = the end of the document
		nth  int
		msg  string
	}{
		{"unknown field", doc(`"claude": {"enabeld": true}`), "providers.claude.enabeld", `"enabeld"`, 0, `unknown field "enabeld" (did you mean "enabled"?)`},
		{"unknown top field", "{\n  \"verison\": 1\n}", "verison", `"verison"`, 0, `did you mean "version"?`},
		{"wrong type", doc(`"gemini": {"enabled": "no"}`), "providers.gemini.enabled", `"no"`, 0, "want a boolean, got string"},
		{"null", doc(`"gemini": {"label": null}`), "providers.gemini.label", "null", 0, "null is not allowed"},
		{"trailing object", "{\"version\": 1}\n{}\n", "", "{}", 0, "trailing data"},
		{"trailing text", "{\"version\": 1} x", "", "x", 0, "trailing data"},
		{"missing version", "{\n  \"providers\": {}\n}", "version", "{", 0, "missing"},
		{"unknown version", "{\"version\": 2}", "version", "2", 0, "unsupported version 2"},
		{"version as string", "{\"version\": \"1\"}", "version", `"1"`, 0, "want a number, got string"},
		{"fractional version", "{\"version\": 1.5}", "version", "1.5", 0, "want an integer"},
		{"syntax", "{\n  \"version\": 1\n  \"providers\": {}\n}", "", `"providers"`, 0, "invalid JSON"},
		{"truncated", "{\n  \"version\": 1,\n  \"provi", "", "", 0, "unexpected end of file"},
		{"empty", "  \n", "", " ", 0, "empty file"},
		{"duplicate key", "{\"version\": 1, \"version\": 1}", "version", `"version"`, 1, `duplicate key "version"`},
		{"not an object", "[1]", "", "[", 0, "want a JSON object, got array"},
		{"providers not an object", "{\"version\": 1, \"providers\": []}", "providers", "[", 0, "want an object, got array"},
		{"bad id", doc(`"Claude": {"extends": "claude"}`), "providers.Claude", `"Claude"`, 0, "invalid provider id"},
		{"reserved id", doc(`"acp": {"extends": "acp", "command": ["x"]}`), "providers.acp", `"acp"`, 0, "reserved"},
		{"new without extends", doc(`"amp": {"command": ["amp-acp"]}`), "providers.amp", `"amp"`, 0, `needs "extends"`},
		{"extends unknown", doc(`"amp": {"extends": "claud"}`), "providers.amp.extends", `"claud"`, 0, `no provider "claud" to extend (want "acp", "pty" or a provider id) (did you mean "claude"?)`},
		{"extends on built-in", doc(`"claude": {"extends": "acp"}`), "providers.claude.extends", `"acp"`, 0, "is built in"},
		{"extends cycle", doc(`"a": {"extends": "b"}, "b": {"extends": "a"}`), "providers.b.extends", `"a"`, 1, "extends cycle: a → b → a"},
		{"new acp without command", doc(`"amp": {"extends": "acp"}`), "providers.amp", `"amp"`, 0, `needs "command"`},
		{"empty command", doc(`"codex": {"command": []}`), "providers.codex.command", "[]", 0, "want the program"},
		{"empty program", doc(`"codex": {"command": [""]}`), "providers.codex.command", `[""]`, 0, "want the program"},
		{"command item type", doc(`"codex": {"command": ["x", 1]}`), "providers.codex.command[1]", "1]", 0, "want a string, got number"},
		{"env name", doc(`"codex": {"env": {"A=B": "1"}}`), `providers.codex.env["A=B"]`, `"A=B"`, 0, "invalid environment variable name"},
		{"env value", doc(`"codex": {"env": {"A": 1}}`), "providers.codex.env.A", "1}", 0, "want a string, got number"},
		{"pass_env not a list", doc(`"codex": {"pass_env": "OPENAI_API_KEY"}`), "providers.codex.pass_env", `"OPENAI_API_KEY"`, 0, "want an array, got string"},
		{"pass_env name", doc(`"codex": {"pass_env": ["OPENAI_API_KEY", "MY-KEY"]}`), "providers.codex.pass_env[1]", `"MY-KEY"`, 0, `invalid variable name "MY-KEY"`},
		{"pass_env everything", doc(`"codex": {"pass_env": ["*"]}`), "providers.codex.pass_env[0]", `"*"`, 0, "passing every variable would pass the daemon's secrets"},
		{"pass_env token", doc(`"codex": {"pass_env": ["AGENTPOOL_TOKEN"]}`), "providers.codex.pass_env[0]", `"AGENTPOOL_TOKEN"`, 0, "daemon's own AGENTPOOL_* variables"},
		{"pass_env socket", doc(`"aider": {"pass_env": ["SSH_AUTH_SOCK"]}`), "providers.aider.pass_env[0]", `"SSH_AUTH_SOCK"`, 0, "not in an agent's world"},
		{"pass_env number", doc(`"codex": {"pass_env": [1]}`), "providers.codex.pass_env[0]", "1]", 0, "want a string, got number"},
		{"permission action", doc(`"codex": {"permissions": {"exec": "ask"}}`), "providers.codex.permissions.exec", `"exec"`, 0, `did you mean "execute"?`},
		{"permission decision", doc(`"codex": {"permissions": {"execute": "maybe"}}`), "providers.codex.permissions.execute", `"maybe"`, 0, `unknown decision "maybe"`},
		{"mode", doc(`"codex": {"mode": "yolo"}`), "providers.codex.mode", `"yolo"`, 0, `unknown mode "yolo"`},
		{"duration syntax", doc(`"codex": {"idle_timeout": "15 minutes"}`), "providers.codex.idle_timeout", `"15 minutes"`, 0, "invalid duration"},
		{"duration zero", doc(`"codex": {"turn_timeout": "0s"}`), "providers.codex.turn_timeout", `"0s"`, 0, "must be positive"},
		{"duration negative", doc(`"codex": {"turn_timeout": "-1m"}`), "providers.codex.turn_timeout", `"-1m"`, 0, "must be positive"},
		{"duration too long", doc(`"codex": {"turn_timeout": "1000h"}`), "providers.codex.turn_timeout", `"1000h"`, 0, "longer than"},
		{"bad regexp", doc(`"aider": {"ready_pattern": "(["}`), "providers.aider.ready_pattern", `"(["`, 0, "invalid regular expression"},
		{"bad busy regexp", doc(`"aider": {"busy_pattern": "a**"}`), "providers.aider.busy_pattern", `"a**"`, 0, "invalid regular expression"},
		{"busy pattern on acp", doc(`"claude": {"busy_pattern": "x"}`), "providers.claude.busy_pattern", `"x"`, 0, "only for pty providers"},
		{"pty field on acp", doc(`"claude": {"ready_pattern": "> $"}`), "providers.claude.ready_pattern", `"> $"`, 0, "only for pty providers"},
		{"pty field on new acp", doc(`"amp": {"extends": "acp", "command": ["a"], "cols": 80}`), "providers.amp.cols", "80", 0, "only for pty providers"},
		{"compat on pty", doc(`"aider": {"compat": {"missing_file_empty": true}}`), "providers.aider.compat", "{\"missing", 0, "only for acp providers"},
		{"compat field", doc(`"gemini": {"compat": {"missing_files_empty": true}}`), "providers.gemini.compat.missing_files_empty", `"missing_files_empty"`, 0, `did you mean "missing_file_empty"?`},
		{"config on pty", doc(`"aider": {"config": {"model": "x"}}`), "providers.aider.config", "{\"model", 0, "only for acp providers"},
		{"config value type", doc(`"codex": {"config": {"model": 5}}`), "providers.codex.config.model", "5}", 0, "want a string, got number"},
		{"config value empty", doc(`"codex": {"config": {"mode": ""}}`), "providers.codex.config.mode", `""`, 0, "must not be empty"},
		{"config not an object", doc(`"codex": {"config": "o3"}`), "providers.codex.config", `"o3"`, 0, "want an object, got string"},
		{"cols range", doc(`"aider": {"cols": 5}`), "providers.aider.cols", "5}", 0, "out of range [20, 1000]"},
		{"rows integer", doc(`"aider": {"rows": 2.5}`), "providers.aider.rows", "2.5", 0, "want an integer"},
		{"cancel keys", doc(`"aider": {"cancel_keys": ""}`), "providers.aider.cancel_keys", `""`, 0, "must not be empty"},
		{"blank label", doc(`"codex": {"label": "  "}`), "providers.codex.label", `"  "`, 0, "must not be empty"},
		{"sandbox not an object", doc(`"codex": {"sandbox": true}`), "providers.codex.sandbox", "true", 0, "want an object, got boolean"},
		{"sandbox unknown field", doc(`"codex": {"sandbox": {"wirte": []}}`), "providers.codex.sandbox.wirte", `"wirte"`, 0, `unknown field "wirte" (did you mean "write"?)`},
		{"sandbox enabled type", doc(`"codex": {"sandbox": {"enabled": 1}}`), "providers.codex.sandbox.enabled", "1}", 0, "want a boolean, got number"},
		{"sandbox required null", doc(`"codex": {"sandbox": {"required": null}}`), "providers.codex.sandbox.required", "null", 0, "null is not allowed"},
		{"sandbox read not a list", doc(`"codex": {"sandbox": {"read": "/opt"}}`), "providers.codex.sandbox.read", `"/opt"`, 0, "want an array, got string"},
		{"sandbox path type", doc(`"codex": {"sandbox": {"read": ["/opt", 7]}}`), "providers.codex.sandbox.read[1]", "7]", 0, "want a string, got number"},
		{"sandbox relative path", doc(`"codex": {"sandbox": {"write": ["/ok", "cache"]}}`), "providers.codex.sandbox.write[1]", `"cache"`, 0, `relative path "cache"`},
		{"sandbox empty path", doc(`"codex": {"sandbox": {"write": [""]}}`), "providers.codex.sandbox.write[0]", `""`, 0, "must not be empty"},
		{"sandbox dotdot", doc(`"codex": {"sandbox": {"read": ["$WORKTREE/../other"]}}`), "providers.codex.sandbox.read[0]", `"$WORKTREE`, 0, `".." component`},
		{"sandbox NUL", doc(`"codex": {"sandbox": {"read": ["/a\u0000b"]}}`), "providers.codex.sandbox.read[0]", `"/a`, 0, "NUL byte"},
		{"sandbox other variable", doc(`"codex": {"sandbox": {"write": ["$HOME/.codex"]}}`), "providers.codex.sandbox.write[0]", `"$HOME`, 0, `unknown variable "$HOME"`},
		{"sandbox inner dollar", doc(`"codex": {"sandbox": {"write": ["$WORKTREE/$X"]}}`), "providers.codex.sandbox.write[0]", `"$WORKTREE`, 0, `"$" is not allowed`},
		{"sandbox tilde user", doc(`"codex": {"sandbox": {"write": ["~root/x"]}}`), "providers.codex.sandbox.write[0]", `"~root`, 0, `only "~/" is expanded`},
		{"sandbox whole home", doc(`"codex": {"sandbox": {"read": ["~/"]}}`), "providers.codex.sandbox.read[0]", `"~/"`, 0, "whole home directory"},
		{"sandbox network word", doc(`"codex": {"sandbox": {"network": "nil"}}`), "providers.codex.sandbox.network", `"nil"`, 0, `unknown network "nil"`},
		{"sandbox network ports word", doc(`"codex": {"sandbox": {"network": "ports"}}`), "providers.codex.sandbox.network", `"ports"`, 0, `unknown network "ports"`},
		{"sandbox network type", doc(`"codex": {"sandbox": {"network": false}}`), "providers.codex.sandbox.network", "false", 0, "got boolean"},
		{"sandbox network null", doc(`"codex": {"sandbox": {"network": null}}`), "providers.codex.sandbox.network", "null", 0, "null is not allowed"},
		{"sandbox no ports", doc(`"codex": {"sandbox": {"network": []}}`), "providers.codex.sandbox.network", "[]", 0, "at least one port or host"},
		{"sandbox port zero", doc(`"codex": {"sandbox": {"network": [443, 0]}}`), "providers.codex.sandbox.network[1]", "0]", 0, "out of range [1, 65535]"},
		{"sandbox port too high", doc(`"codex": {"sandbox": {"network": [65536]}}`), "providers.codex.sandbox.network[0]", "65536", 0, "out of range [1, 65535]"},
		{"sandbox port fraction", doc(`"codex": {"sandbox": {"network": [80.5]}}`), "providers.codex.sandbox.network[0]", "80.5", 0, "want an integer"},
		{"sandbox port string", doc(`"codex": {"sandbox": {"network": ["443"]}}`), "providers.codex.sandbox.network[0]", `"443"`, 0, "want a number, got string"},
		{"sandbox host url", doc(`"codex": {"sandbox": {"network": [443, "api.openai.com", "https://api.openai.com"]}}`), "providers.codex.sandbox.network[2]", `"https:`, 0, `host "https://api.openai.com": a URL`},
		{"sandbox host port", doc(`"codex": {"sandbox": {"network": ["api.openai.com:0"]}}`), "providers.codex.sandbox.network[0]", `"api.`, 0, `invalid port "0"`},
		{"sandbox host wildcard", doc(`"codex": {"sandbox": {"network": ["api.*.com"]}}`), "providers.codex.sandbox.network[0]", `"api.`, 0, `"*" is allowed only as the whole first label`},
		{"sandbox host tld", doc(`"codex": {"sandbox": {"network": ["*.com"]}}`), "providers.codex.sandbox.network[0]", `"*.com"`, 0, "whole top-level domain"},
		{"sandbox host range", doc(`"codex": {"sandbox": {"network": ["10.1.2.3/8"]}}`), "providers.codex.sandbox.network[0]", `"10.`, 0, `did you mean "10.0.0.0/8"?`},
		{"sandbox host brackets", doc(`"codex": {"sandbox": {"network": ["[10.0.0.1]:80"]}}`), "providers.codex.sandbox.network[0]", `"[10`, 0, "brackets are for IPv6"},
		{"sandbox host empty", doc(`"codex": {"sandbox": {"network": [""]}}`), "providers.codex.sandbox.network[0]", `""`, 0, "empty"},
		{"sandbox network item type", doc(`"codex": {"sandbox": {"network": [443, true]}}`), "providers.codex.sandbox.network[1]", "true", 0, "want a number (a port) or a string (a host), got boolean"},
		{"sandbox on a new provider", doc(`"amp": {"extends": "acp", "command": ["a"], "sandbox": {"read": ["x"]}}`), "providers.amp.sandbox.read[0]", `"x"`, 0, "relative path"},
		{"mcp not an object", doc(`"codex": {"mcp_servers": [{"name": "fs"}]}`), "providers.codex.mcp_servers", "[{", 0, "want an object, got array"},
		{"mcp unknown field", doc(`"codex": {"mcp_servers": {"fs": {"comand": "x"}}}`), "providers.codex.mcp_servers.fs.comand", `"comand"`, 0, `unknown field "comand" (did you mean "command"?)`},
		{"mcp no command", doc(`"codex": {"mcp_servers": {"fs": {"args": ["."]}}}`), "providers.codex.mcp_servers.fs.command", `{"args"`, 0, "needs the program"},
		{"mcp url scheme", doc(`"codex": {"mcp_servers": {"gh": {"type": "http", "url": "api.github.com"}}}`), "providers.codex.mcp_servers.gh.url", `"api.github.com"`, 0, "http:// or https://"},
		{"mcp env on http", doc(`"codex": {"mcp_servers": {"gh": {"type": "http", "url": "https://x", "env": {"A": "b"}}}}`), "providers.codex.mcp_servers.gh.env", `{"A"`, 0, "only for stdio servers"},
		{"mcp shared on a relative path", doc(`"codex": {"mcp_servers": {"fs": {"command": "mcp-fs", "args": ["."], "shared": true}}}`), "providers.codex.mcp_servers.fs.shared", `true`, 0, `args[0] "." is a relative path: a shared server runs in a state directory of its own`},
		{"mcp shared on the worktree", doc(`"codex": {"mcp_servers": {"fs": {"command": "mcp-fs", "env": {"ROOT": "$WORKTREE/src"}, "shared": true}}}`), "providers.codex.mcp_servers.fs.shared", `true`, 0, `env.ROOT "$WORKTREE/src" names the worktree`},
		{"mcp shared not a boolean", doc(`"codex": {"mcp_servers": {"fs": {"command": "mcp-fs", "shared": "yes"}}}`), "providers.codex.mcp_servers.fs.shared", `"yes"`, 0, "want a boolean"},
		{"mcp shared on http", doc(`"codex": {"mcp_servers": {"gh": {"type": "http", "url": "https://x", "shared": false}}}`), "providers.codex.mcp_servers.gh.shared", `false`, 0, "only for stdio servers"},
		{"mcp sandbox when not shared", doc(`"codex": {"mcp_servers": {"git": {"command": "mcp-git", "shared": false, "sandbox": {"network": "none"}}}}`), "providers.codex.mcp_servers.git.sandbox", `{"network"`, 0, "only for a server the daemon runs"},
		{"mcp sandbox field", doc(`"codex": {"mcp_servers": {"m": {"command": "mcp-m", "sandbox": {"netwrok": "none"}}}}`), "providers.codex.mcp_servers.m.sandbox.netwrok", `"netwrok"`, 0, `unknown field "netwrok"`},
		{"mcp header value", doc(`"codex": {"mcp_servers": {"gh": {"type": "sse", "url": "https://x", "headers": {"A": "b\nc"}}}}`), "providers.codex.mcp_servers.gh.headers.A", `{"A"`, 0, "line break"},
		{"mcp type", doc(`"codex": {"mcp_servers": {"x": {"type": "websocket", "url": "https://x"}}}`), "providers.codex.mcp_servers.x.type", `"websocket"`, 0, "unknown transport"},
		{"mcp env type", doc(`"codex": {"mcp_servers": {"fs": {"command": "c", "env": {"A": true}}}}`), "providers.codex.mcp_servers.fs.env.A", "true", 0, "want a string, got boolean"},
		{"mcp placeholder", doc(`"codex": {"mcp_servers": {"fs": {"command": "c", "env": {"T": "<redacted>"}}}}`), "providers.codex.mcp_servers.fs.env.T", `{"T"`, 0, "leave this key out"},
		{"mcp on pty", doc(`"aider": {"mcp_servers": {}}`), "providers.aider.mcp_servers", "{}", 0, "only for acp providers"},
		{"mcp empty name", doc(`"codex": {"mcp_servers": {"": {"command": "c"}}}`), `providers.codex.mcp_servers[""]`, `""`, 0, "must not be empty"},
		{"multibyte column", doc(`"codex": {"label": "Ünïcødé", "mode": "x"}`), "providers.codex.mode", `"x"`, 0, "unknown mode"},
		{"too large", "{\"version\": 1, \"x\": \"" + strings.Repeat("a", maxFileSize) + "\"}", "", "{", 0, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseDocument("providers.json", []byte(tt.doc), builtins("/bin/agentpool"))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("parseDocument(%q) error = %v; want a *ValidationError", tt.name, err)
			}
			line, col := len(strings.Split(tt.doc, "\n")), len([]rune(tt.doc[strings.LastIndex(tt.doc, "\n")+1:]))+1
			if tt.at != "" {
				line, col = position(t, tt.doc, tt.at, tt.nth)
			}
			if ve.Path != tt.path || ve.Line != line || ve.Col != col || !strings.Contains(ve.Msg, tt.msg) {
				t.Errorf("parseDocument(%q) error = %q at %s %d:%d; want %q at %s %d:%d",
					tt.name, ve.Msg, ve.Path, ve.Line, ve.Col, tt.msg, tt.path, line, col)
			}
			wantText := "providers.json:"
			if !strings.HasPrefix(ve.Error(), wantText) || (tt.path != "" && !strings.Contains(ve.Error(), tt.path+": ")) {
				t.Errorf("Error() = %q; want file:line:col: path: msg", ve.Error())
			}
		})
	}
}

func TestParseDocumentReportsEveryProblem(t *testing.T) {
	doc := `{"version": 1, "providers": {"claude": {"enabeld": true, "mode": "yolo"}, "x": {}}}`
	_, err := parseDocument("p.json", []byte(doc), builtins("/bin/agentpool"))
	var paths []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		paths = append(paths, e.(*ValidationError).Path)
	}
	want := "providers.claude.enabeld providers.claude.mode providers.x"
	if got := strings.Join(paths, " "); got != want {
		t.Errorf("parseDocument(%s) paths = %q; want %q", doc, got, want)
	}
}

func TestParseDocumentCapsDiagnostics(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"version": 1, "providers": {"claude": {`)
	for i := range 50 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`"f` + strings.Repeat("x", i) + `": 1`)
	}
	b.WriteString("}}}")
	_, err := parseDocument("p.json", []byte(b.String()), builtins("/bin/agentpool"))
	errs := err.(interface{ Unwrap() []error }).Unwrap()
	if len(errs) != maxDiagnostics+1 || !strings.Contains(errs[maxDiagnostics].Error(), "too many errors") {
		t.Errorf("parseDocument(50 unknown fields) gave %d errors, last %v; want %d and a note", len(errs), errs[len(errs)-1], maxDiagnostics+1)
	}
}

func TestLineCol(t *testing.T) {
	data := []byte("ab\nçé\"x\"\n")
	tests := []struct{ off, line, col int }{
		{0, 1, 1}, {2, 1, 3}, {3, 2, 1}, {7, 2, 3}, {len(data), 3, 1}, {-5, 1, 1}, {999, 3, 1},
	}
	for _, tt := range tests {
		if line, col := lineCol(data, tt.off); line != tt.line || col != tt.col {
			t.Errorf("lineCol(%q, %d) = %d:%d; want %d:%d", data, tt.off, line, col, tt.line, tt.col)
		}
	}
}

func TestJoinPath(t *testing.T) {
	tests := []struct{ path, key, want string }{
		{"", "version", "version"},
		{"providers", "claude-cli", "providers.claude-cli"},
		{"providers", "fs.read", `providers["fs.read"]`},
		{"providers.x.env", "A B", `providers.x.env["A B"]`},
		{"", "", `[""]`},
	}
	for _, tt := range tests {
		if got := joinPath(tt.path, tt.key); got != tt.want {
			t.Errorf("joinPath(%q, %q) = %q; want %q", tt.path, tt.key, got, tt.want)
		}
	}
}

func FuzzParseDocument(f *testing.F) {
	f.Add([]byte(`{"version": 1, "providers": {"amp": {"extends": "acp", "command": ["amp-acp"]}}}`))
	f.Add([]byte(`{"version": 1, "providers": {"a": {"extends": "b"}, "b": {"extends": "a"}}}`))
	f.Add([]byte(`{"version": 1} trailing`))
	f.Add([]byte(`{"version": 1, "providers": {"codex": {"sandbox": {"read": ["~/a", "$WORKTREE/b"], "network": [443, 80]}}}}`))
	f.Add([]byte(`[[[[[[[[[[`))
	f.Add([]byte("{\"version\": 1, \"providers\": {\"claude\": {\"label\": \"\\u00e9\"}}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		defs, err := parseDocument("p.json", data, builtins("/bin/agentpool"))
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("parseDocument(%q) error = %v; want a *ValidationError", data, err)
			}
			return
		}
		for _, id := range []string{"claude", "demo", "aider"} {
			if defs[id] == nil {
				t.Fatalf("parseDocument(%q) lost built-in %q", data, id)
			}
		}
		// A valid document stays valid, with the same meaning, once
		// reformatted the way Patch writes it.
		root, perr := parseTree(data)
		if perr != nil {
			t.Fatalf("parseTree(%q) = %v after parseDocument accepted it", data, perr.msg)
		}
		again, err := parseDocument("p.json", root.format(), builtins("/bin/agentpool"))
		if err != nil || len(again) != len(defs) {
			t.Fatalf("reformatted %q: error = %v, %d providers; want nil, %d", data, err, len(again), len(defs))
		}
	})
}
