// The curated catalog of coding agents that speak ACP (the Agent Client
// Protocol), for Providers → Add provider: how to install each, the
// command that starts it in ACP mode, and the environment agentpool
// recommends for it. id is the provider id agentpool gives it: the
// built-in's, or the one proposed for a new entry in providers.json.
// Credentials never go here: each agent keeps its own login.

/** CATALOG lists the ACP agents the Add provider dialog offers. */
export const CATALOG = [
  { id: 'claude', name: 'Claude Code', command: ['claude-agent-acp'],
    install: 'npm install -g @agentclientprotocol/claude-agent-acp',
    note: 'The ACP adapter of Claude Code; uses your Claude login or ANTHROPIC_API_KEY.' },
  { id: 'codex', name: 'Codex', command: ['codex-acp'],
    install: 'npm install -g @zed-industries/codex-acp',
    note: 'The ACP adapter of OpenAI Codex; uses your codex login or OPENAI_API_KEY.' },
  { id: 'gemini', name: 'Gemini CLI', command: ['gemini', '--acp'], env: { GEMINI_CLI_NO_RELAUNCH: 'true' },
    install: 'npm install -g @google/gemini-cli',
    note: 'Sign in once by running gemini, or set GEMINI_API_KEY.' },
  { id: 'qwen', name: 'Qwen Code', command: ['qwen', '--acp'], env: { QWEN_CODE_NO_RELAUNCH: 'true' },
    install: 'npm install -g @qwen-code/qwen-code',
    note: 'Needs Node 22 or later. Sign in once by running qwen.' },
  { id: 'opencode', name: 'OpenCode', command: ['opencode', 'acp'],
    install: 'npm install -g opencode-ai',
    note: 'Configure a model once with opencode auth login.' },
  { id: 'goose', name: 'Goose', command: ['goose', 'acp'],
    install: 'curl -fsSL https://github.com/block/goose/releases/download/stable/download_cli.sh | bash',
    note: 'Block\'s agent; choose a model once with goose configure.' },
  { id: 'copilot', name: 'GitHub Copilot', command: ['copilot', '--acp'],
    install: 'npm install -g @github/copilot',
    note: 'Needs a Copilot subscription; sign in once by running copilot.' },
  { id: 'amp', name: 'Amp', command: ['amp-acp'],
    install: 'npm install -g amp-acp',
    note: 'An ACP adapter over Sourcegraph\'s Amp CLI (npm install -g @sourcegraph/amp); sign in with amp login or set AMP_API_KEY.' },
];
