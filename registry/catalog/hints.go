package catalog

import "github.com/agentpool/agentpool/registry"

// hint is what agentpool knows of a registry agent that the registry does
// not say.
type hint struct {
	// provider is the provider id the agent becomes, when not its
	// registry id.
	provider string
	// builtIn says provider is a built-in.
	builtIn bool
	// command and install, when set, replace the distribution's: a
	// built-in's command and the install that provides it (which may
	// differ from the registry's distribution, e.g. a newer adapter), or
	// a global install agentpool prefers to npx.
	command []string
	install string
	// env is recommended environment, added to the distribution's.
	env  map[string]string
	note string
}

// hintFor returns the hint for registry id, by the ids the public
// registry used over time.
func hintFor(id string) (hint, bool) {
	switch id {
	case "claude-code-acp", "claude-agent-acp", "claude-code", "claude":
		return hint{provider: registry.ProviderClaude, builtIn: true, command: []string{"claude-agent-acp"},
			install: "npm install -g @agentclientprotocol/claude-agent-acp",
			note:    "The ACP adapter of Claude Code; uses your Claude login or ANTHROPIC_API_KEY."}, true
	case "codex-acp", "codex":
		return hint{provider: registry.ProviderCodex, builtIn: true, command: []string{"codex-acp"},
			install: "npm install -g @zed-industries/codex-acp",
			note:    "The ACP adapter of OpenAI Codex; uses your codex login or OPENAI_API_KEY."}, true
	case "gemini", "gemini-cli":
		return hint{provider: registry.ProviderGemini, builtIn: true, command: []string{"gemini", "--acp"},
			install: "npm install -g @google/gemini-cli", env: map[string]string{"GEMINI_CLI_NO_RELAUNCH": "true"},
			note: "Sign in once by running gemini, or set GEMINI_API_KEY."}, true
	case "qwen-code", "qwen":
		return hint{provider: registry.ProviderQwen, builtIn: true, command: []string{"qwen", "--acp"},
			install: "npm install -g @qwen-code/qwen-code", env: map[string]string{"QWEN_CODE_NO_RELAUNCH": "true"},
			note: "Needs Node 22 or later. Sign in once by running qwen."}, true
	case "opencode":
		return hint{provider: registry.ProviderOpenCode, builtIn: true, command: []string{"opencode", "acp"},
			install: "npm install -g opencode-ai",
			note:    "Configure a model once with opencode auth login."}, true
	case "goose":
		return hint{provider: registry.ProviderGoose, builtIn: true, command: []string{"goose", "acp"},
			install: "curl -fsSL https://github.com/block/goose/releases/download/stable/download_cli.sh | bash",
			note:    "Block's agent; choose a model once with goose configure."}, true
	case "github-copilot", "github-copilot-cli", "copilot":
		return hint{provider: registry.ProviderCopilot, builtIn: true, command: []string{"copilot", "--acp"},
			install: "npm install -g @github/copilot",
			note:    "Needs a Copilot subscription; sign in once by running copilot. The built-in runs the Copilot CLI."}, true
	case "amp-acp":
		// As agentpool offered it before reading the registry: installed
		// once, not fetched by npx at each start.
		return hint{provider: "amp", command: []string{"amp-acp"}, install: "npm install -g amp-acp",
			note: "An ACP adapter over Sourcegraph's Amp CLI (npm install -g @sourcegraph/amp); sign in with amp login or set AMP_API_KEY."}, true
	case "minion-code":
		return hint{note: "Needs uv (a Python package runner)."}, true
	}
	return hint{}, false
}
