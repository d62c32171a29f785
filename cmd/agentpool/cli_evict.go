package main

import (
	"context"
	"fmt"

	"github.com/agentpool/agentpool/httpapi"
)

// evictUsage is the synopsis and description of evict.
const evictUsage = `evict SESSION [AGENT]

Stops the session's warm agent (AGENT, by default the session's only warm
agent, else its active one) now, as if it had been idle too long, and
frees its memory and its slot in the pool. The session stays open: the
agent starts again (resuming its conversation when it can) on the next
prompt to it. An agent running a turn is refused: cancel the turn first.
"ps" lists the warm agents.`

// evict runs `evict`.
func (c *cli) evict(ctx context.Context, args []string) error {
	fs := c.flagSet("evict", evictUsage)
	pos, err := c.parse(fs, args, 1, 2)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	session := pos[0]
	var agent string
	if len(pos) == 2 {
		agent = pos[1]
	} else if agent, err = c.defaultAgent(ctx, api, session); err != nil {
		return err
	}
	if err := api.Evict(ctx, session, agent); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "agent %s of session %s evicted\n", agent, session)
	return nil
}

// defaultAgent is the agent a command on session means when it names
// none: the session's only warm agent, else its active agent.
func (c *cli) defaultAgent(ctx context.Context, api *httpapi.Client, session string) (string, error) {
	s, err := api.Session(ctx, session)
	if err != nil {
		return "", err
	}
	if len(s.Agents) == 1 {
		return s.Agents[0].Agent, nil
	}
	if s.ActiveAgent == "" {
		return "", fmt.Errorf("session %s has no active agent: name the agent to evict (%s ps lists the warm ones)", session, c.self())
	}
	return s.ActiveAgent, nil
}
