package main

import (
	"errors"
	"fmt"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/registry"
)

// installCommand is the command that installs built-in provider id's
// program (docs/agents.md, "Using a real agent"), "" when there is none to
// suggest.
func installCommand(id string) string {
	switch id {
	case registry.ProviderClaude:
		return "npm install -g @agentclientprotocol/claude-agent-acp"
	case registry.ProviderCodex:
		return "npm install -g @zed-industries/codex-acp"
	case registry.ProviderGemini:
		return "npm install -g @google/gemini-cli"
	case registry.ProviderQwen:
		return "npm install -g @qwen-code/qwen-code"
	case registry.ProviderClaudeCLI:
		return "npm install -g @anthropic-ai/claude-code"
	}
	return ""
}

// agentNotInstalled is the error of a command refused because agent id is
// not installed: the daemon's reason, then how to install it and what
// else to do.
func (c *cli) agentNotInstalled(id string, err error) error {
	var ae *httpapi.Error
	why := err.Error()
	if errors.As(err, &ae) {
		why = ae.Message
	}
	how := "install its command on the daemon's PATH"
	if cmd := installCommand(id); cmd != "" {
		how = "install it: " + cmd
	}
	return fmt.Errorf("agent %s is not installed, so no session was created: %s\n  To use it, %s (it needs its own credentials), then run this again; "+
		"%s providers list shows the agents that are ready (--agent %s is the built-in demo)",
		id, why, how, c.self(), registry.ProviderDemo)
}

// isNotInstalled says whether err is the API's answer for an agent that is
// not installed.
func isNotInstalled(err error) bool {
	var ae *httpapi.Error
	return errors.As(err, &ae) && ae.Code == httpapi.CodeNotInstalled
}
