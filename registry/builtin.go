package registry

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// definition is one provider once the built-ins and the file are merged,
// before its command is looked up in PATH.
type definition struct {
	id          string
	label       string
	description string
	builtIn     bool
	// inFile is true when the file has an entry for the provider.
	inFile  bool
	kind    backends.Kind
	enabled bool
	command []string
	env     map[string]string
	// passEnv names the variables of the daemon's environment its agents
	// get besides backends.BaseEnv (Spec.PassEnv).
	passEnv     []string
	permissions map[string]string
	// config is the provider's session config defaults (Spec.Config).
	config      map[string]string
	mode        string
	idleTimeout time.Duration
	turnTimeout time.Duration
	compat      backends.Compat
	pty         backends.PTYSpec
	// sandbox has its paths as written: "~/" not yet expanded.
	sandbox backends.SandboxSpec
	// mcpServers are passed to the agent's sessions (ACP only).
	mcpServers backends.MCPServers
	// budget is the provider's limit over all its sessions.
	budget backends.Budget
	// spares is how many spare sessions to keep per repository (see
	// pool.SparesConfig).
	spares int
	// handoff and handoffBytes are the provider's briefing settings
	// (backends.Spec.Handoff, HandoffBytes).
	handoff      string
	handoffBytes int
}

// clone returns a deep copy of d.
func (d *definition) clone() *definition {
	c := *d
	c.command = slices.Clone(d.command)
	c.env = maps.Clone(d.env)
	c.passEnv = slices.Clone(d.passEnv)
	c.permissions = maps.Clone(d.permissions)
	c.config = maps.Clone(d.config)
	c.pty.ResumeArgs = slices.Clone(d.pty.ResumeArgs)
	c.sandbox = cloneSandbox(d.sandbox)
	c.mcpServers = d.mcpServers.Clone()
	return &c
}

// Built-in provider ids.
const (
	ProviderClaude    = "claude"
	ProviderCodex     = "codex"
	ProviderGemini    = "gemini"
	ProviderQwen      = "qwen"
	ProviderOpenCode  = "opencode"
	ProviderGoose     = "goose"
	ProviderCopilot   = "copilot"
	ProviderClaudeCLI = "claude-cli"
	ProviderAider     = "aider"
	ProviderDemo      = "demo"
)

// DemoAgentArg is the argument that makes the agentpool binary run its
// built-in demo agent.
const DemoAgentArg = "demo-agent"

// Screen patterns of the built-in terminal providers.
const (
	// claudeReadyPattern matches the claude CLI's empty input row: "❯"
	// (U+276F) and a no-break space, nothing typed after it (Claude Code
	// 2.1.330). Earlier prompts in the transcript show "❯" and a plain
	// space; typed or restored text follows the no-break space.
	claudeReadyPattern = `^❯\x{a0} *$`
	// claudeBusyPattern matches the hint the claude CLI shows while it works.
	claudeBusyPattern = `(?i)esc to interrupt`
	// aiderReadyPattern matches a line that holds only aider's prompt,
	// with its optional mode name ("> ", "ask> ", "architect> ").
	aiderReadyPattern = `^[\w-]*> $`
	// aiderCancelMinInterval keeps two Ctrl-C apart: aider 0.86 exits on
	// a second one within 2s.
	aiderCancelMinInterval = 2 * time.Second
)

// Chrome rows of the built-in terminal providers, left out of replies
// (checked against Claude Code 2.1.330's screens and aider 0.86's).
var (
	// claudeIgnorePatterns: the logo, notices, the mode row ("⏵⏵ auto
	// mode on", "⏸ manual mode on"), rule lines, "✻ Worked for 2s" and
	// key hints ("ctrl+y to paste deleted text").
	claudeIgnorePatterns = []string{`^\s*[▐▝▘▗▖▛▜▙▟█▀▄▌]{2}`, `^▎ `, `^\s*[⏵⏸]`, `^\s*─{3,}\s*$`,
		`^✻ .* for \d+[hms]`, `ctrl\+\w+ to `}
	// aiderIgnorePatterns: the token line, rule lines and the list of
	// files in the chat above the prompt.
	aiderIgnorePatterns = []string{`^Tokens: .* sent`, `^\s*─{3,}\s*$`, `^(Readonly: )?[\w./-]*\w\.\w+( [\w./-]*\w\.\w+)*$`}
)

// builtins returns the providers agentpool knows without a config file,
// sorted by id. selfPath is the agentpool binary, for the demo agent.
func builtins(selfPath string) []*definition {
	acp := func(id, label, desc string, command []string, env map[string]string) *definition {
		return &definition{id: id, label: label, description: desc, builtIn: true,
			kind: backends.KindACP, enabled: true, command: command, env: env}
	}
	gemini := acp(ProviderGemini, "Gemini CLI", "Google Gemini CLI in ACP mode",
		[]string{"gemini", "--acp"}, map[string]string{"GEMINI_CLI_NO_RELAUNCH": "true"})
	// Gemini cannot create a file after a read answered "not found".
	gemini.compat.MissingFileEmpty = true
	claude := acp(ProviderClaude, "Claude Code", "Claude Code through the claude-agent-acp adapter",
		[]string{"claude-agent-acp"}, nil)
	// claude-agent-acp does not take $/cancel_request (ACP-NOTES item 18).
	claude.compat.NoCancelRequest = true
	defs := []*definition{
		claude,
		acp(ProviderCodex, "Codex", "OpenAI Codex through the codex-acp adapter",
			[]string{"codex-acp"}, nil),
		gemini,
		acp(ProviderQwen, "Qwen Code", "Qwen Code in ACP mode",
			[]string{"qwen", "--acp"}, map[string]string{"QWEN_CODE_NO_RELAUNCH": "true"}),
		acp(ProviderOpenCode, "OpenCode", "OpenCode in ACP mode",
			[]string{"opencode", "acp"}, nil),
		acp(ProviderGoose, "Goose", "Block's Goose in ACP mode",
			[]string{"goose", "acp"}, nil),
		acp(ProviderCopilot, "GitHub Copilot", "GitHub Copilot CLI in ACP mode",
			[]string{"copilot", "--acp"}, nil),
		acp(ProviderDemo, "Demo agent", "agentpool's built-in demo agent: works without any install",
			[]string{selfPath, DemoAgentArg}, nil),
		{id: ProviderClaudeCLI, label: "Claude Code (terminal)",
			description: "a terminal agent: agentpool runs the interactive claude CLI in a terminal, " +
				"types your prompts into it and reads its answers from the screen; Esc cancels a turn",
			builtIn: true, kind: backends.KindPTY, enabled: true, command: []string{"claude"},
			pty: backends.PTYSpec{ResumeArgs: []string{"--continue"}, ReadyPattern: claudeReadyPattern,
				BusyPattern: claudeBusyPattern, CancelKeys: "\x1b", ClearKeys: "\x15",
				IgnorePatterns: claudeIgnorePatterns}},
		{id: ProviderAider, label: "Aider", description: "a terminal agent: agentpool runs the interactive aider CLI in a terminal, " +
			"types your prompts into it and reads its answers from the screen; Ctrl-C cancels a turn",
			builtIn: true, kind: backends.KindPTY, enabled: true, command: []string{"aider"},
			pty: backends.PTYSpec{ResumeArgs: []string{"--restore-chat-history"}, ReadyPattern: aiderReadyPattern,
				CancelKeys: "\x03", CancelMinInterval: aiderCancelMinInterval, IgnorePatterns: aiderIgnorePatterns}},
	}
	for _, d := range defs {
		d.sandbox = defaultSandbox(stateDirs(d.id)...)
		d.passEnv = builtinPassEnv(d.id)
	}
	slices.SortFunc(defs, func(a, b *definition) int { return cmp.Compare(a.id, b.id) })
	return defs
}

// stateFiles are the paths of stateDirs that are files: the daemon makes
// the others when they are missing (see defaultSandbox), not these.
var stateFiles = []string{"~/.claude.json"}

// stateDirs returns where built-in provider id keeps its state, which its
// sandbox lets it write (before CommonWritable).
func stateDirs(id string) []string {
	switch id {
	case ProviderClaude, ProviderClaudeCLI:
		return []string{"~/.claude", "~/.claude.json", "~/.cache/claude-cli-nodejs"}
	case ProviderCodex:
		return []string{"~/.codex"}
	case ProviderGemini:
		return []string{"~/.gemini"}
	case ProviderQwen:
		return []string{"~/.qwen"}
	case ProviderOpenCode:
		return []string{"~/.local/share/opencode", "~/.local/state/opencode", "~/.config/opencode", "~/.cache/opencode"}
	case ProviderCopilot:
		// Its native binary unpacks its own code into ~/.cache/copilot
		// at each start, and fails when it cannot.
		return []string{"~/.copilot", "~/.cache/copilot"}
	case ProviderGoose:
		return []string{"~/.config/goose", "~/.local/share/goose"}
	case ProviderAider:
		// aider keeps its chat history and tags cache in the worktree.
		return []string{"~/.aider"}
	}
	return nil
}

// builtinPassEnv returns the variables of the daemon's environment that
// built-in provider id's agent reads (its "pass_env"): its API keys, the
// endpoints and models it takes from the environment, and the variables
// that move its state directory. Cloud credentials (AWS_*, and
// GOOGLE_APPLICATION_CREDENTIALS but for gemini) are left for the owner
// to add: an agent gets them only when asked for by name.
func builtinPassEnv(id string) []string {
	switch id {
	case ProviderClaude, ProviderClaudeCLI:
		return []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS",
			"ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
			"ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX",
			"ANTHROPIC_VERTEX_PROJECT_ID", "CLOUD_ML_REGION", "CLAUDE_CONFIG_DIR"}
	case ProviderCodex:
		return []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORGANIZATION", "OPENAI_PROJECT", "CODEX_API_KEY",
			"CODEX_HOME", "CODEX_SQLITE_HOME", "CODEX_CA_CERTIFICATE"}
	case ProviderGemini:
		return []string{"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION",
			"GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA", "GOOGLE_APPLICATION_CREDENTIALS", "GEMINI_MODEL", "GEMINI_CLI_HOME",
			"GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL"}
	case ProviderQwen:
		return []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "DASHSCOPE_API_KEY"}
	case ProviderOpenCode:
		return []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY",
			"OPENROUTER_API_KEY", "GROQ_API_KEY", "DEEPSEEK_API_KEY", "MISTRAL_API_KEY", "XAI_API_KEY",
			"OPENCODE_CONFIG", "OPENCODE_CONFIG_DIR"}
	case ProviderCopilot:
		// Copilot asks for the tokens by name (its login methods); the
		// COPILOT_PROVIDER_* variables and COPILOT_MODEL choose a model
		// provider of the user's own ("BYOK", copilot --help).
		return []string{"COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN",
			"COPILOT_PROVIDER_BASE_URL", "COPILOT_PROVIDER_TYPE", "COPILOT_PROVIDER_API_KEY", "COPILOT_PROVIDER_BEARER_TOKEN",
			"COPILOT_PROVIDER_HEADERS", "COPILOT_PROVIDER_WIRE_API", "COPILOT_MODEL", "COPILOT_PROVIDER_MODEL_ID",
			"COPILOT_PROVIDER_WIRE_MODEL"}
	case ProviderGoose:
		return []string{"GOOSE_PROVIDER", "GOOSE_MODEL", "GOOSE_MODE", "GOOSE_DISABLE_KEYRING",
			"ANTHROPIC_API_KEY", "ANTHROPIC_HOST", "OPENAI_API_KEY", "OPENAI_HOST", "OPENAI_BASE_PATH",
			"GOOGLE_API_KEY", "OPENROUTER_API_KEY", "GROQ_API_KEY", "OLLAMA_HOST", "DATABRICKS_HOST", "DATABRICKS_TOKEN"}
	case ProviderAider:
		return []string{"AIDER_*", "OPENAI_API_KEY", "OPENAI_API_BASE", "ANTHROPIC_API_KEY", "GEMINI_API_KEY",
			"DEEPSEEK_API_KEY", "OPENROUTER_API_KEY", "GROQ_API_KEY", "XAI_API_KEY", "OLLAMA_API_BASE"}
	}
	return nil
}
