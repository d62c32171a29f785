package registry

import (
	"regexp"
	"strings"
	"testing"
)

// The built-in terminal providers' patterns match the screens of the
// programs they drive (one screen line per case, as the PTY backend
// renders it) and nothing else.
func TestBuiltinScreenPatterns(t *testing.T) {
	defs := map[string]*definition{}
	for _, d := range builtins("/bin/agentpool") {
		defs[d.id] = d
	}
	tests := []struct {
		provider, which, line string
		match                 bool
	}{
		{ProviderClaudeCLI, "ready", "❯\u00a0", true},
		{ProviderClaudeCLI, "ready", "❯\u00a0  ", true},
		{ProviderClaudeCLI, "ready", "❯\u00a0hold on before answering", false}, // restored after a cancel
		{ProviderClaudeCLI, "ready", "❯ say hello", false},                     // an earlier prompt
		{ProviderClaudeCLI, "ready", "│ > ", false},
		{ProviderClaudeCLI, "ready", "⏺ Done: 3 files > 2 KB", false},
		{ProviderClaudeCLI, "busy", "  ⏵⏵ auto mode on (shift+tab to cycle) · esc to interrupt", true},
		{ProviderClaudeCLI, "busy", "✻ Thinking… (12s · esc to interrupt)", true},
		{ProviderClaudeCLI, "busy", "✻ Thinking… (Esc to interrupt)", true},
		{ProviderClaudeCLI, "busy", "? for shortcuts", false},
		{ProviderAider, "ready", "> ", true},
		{ProviderAider, "ready", "architect> ", true},
		{ProviderAider, "ready", "ask-mode> ", true},
		{ProviderAider, "ready", "> fix the tests", false},
		{ProviderAider, "ready", "Tokens: 2.1k sent > ", false},
	}
	for _, tt := range tests {
		t.Run(tt.provider+"/"+tt.which+"/"+tt.line, func(t *testing.T) {
			d := defs[tt.provider]
			if d == nil {
				t.Fatalf("no built-in %q", tt.provider)
			}
			pattern := d.pty.ReadyPattern
			if tt.which == "busy" {
				pattern = d.pty.BusyPattern
			}
			re, err := regexp.Compile("(?m)" + pattern)
			if err != nil {
				t.Fatalf("%s %s pattern %q: %v", tt.provider, tt.which, pattern, err)
			}
			screen := "earlier output\n" + tt.line + "\nstatus line"
			if got := re.MatchString(screen); got != tt.match {
				t.Errorf("%s pattern %q MatchString(%q) = %v; want %v", tt.which, pattern, tt.line, got, tt.match)
			}
		})
	}
	for id, keys := range map[string]string{ProviderClaudeCLI: "\x1b", ProviderAider: "\x03"} {
		if got := defs[id].pty.CancelKeys; got != keys {
			t.Errorf("%s cancel keys = %q; want %q", id, got, keys)
		}
	}
	if got := defs[ProviderAider].pty.ResumeArgs; strings.Join(got, " ") != "--restore-chat-history" {
		t.Errorf("aider resume args = %q; want [--restore-chat-history]", got)
	}
}
