// Package mcpshare runs stdio MCP servers once for the whole daemon and
// lets every agent that names one reach that copy.
//
// A Manager keeps one server per definition (its command, arguments,
// environment and sandbox), started on first use in a state directory of
// its own, in the jail Config.Jail makes for it, restarted on the next
// use after it ended, and stopped after Config.IdleTimeout without a
// call. The Manager is the server's one MCP client (the official Go SDK)
// and serves each agent an MCP server of its own over Streamable HTTP on
// loopback: every request names its agent by a bearer credential (an
// Attach), which reaches only the servers it was given. Tool calls,
// resource reads, prompts and completions are proxied as calls of the
// Manager's client, so request ids never collide; an agent's cancellation
// cancels its call; progress goes back to the agent that asked for it;
// list changes reach every agent; a server's sampling or elicitation
// request goes to the agent whose call is the only one in flight and is
// refused otherwise; roots/list is answered with no roots.
//
// Relay is the other end for agents that take stdio servers only: a
// stdio-to-HTTP copy of messages that the agentpool mcp-relay command runs.
package mcpshare
