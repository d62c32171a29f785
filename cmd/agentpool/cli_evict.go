package main

import (
	"context"
	"fmt"
)

// evictUsage is the synopsis and description of evict.
const evictUsage = `evict SESSION AGENT

Stops the session's warm agent now, as if it had been idle too long, and
frees its memory and its slot in the pool. The session stays open: the
agent starts again (resuming its conversation when it can) on the next
prompt to it. An agent running a turn is refused: cancel the turn first.
"ps" lists the warm agents.`

// evict runs `evict`.
func (c *cli) evict(ctx context.Context, args []string) error {
	fs := c.flagSet("evict", evictUsage)
	pos, err := c.parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	if err := api.Evict(ctx, pos[0], pos[1]); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "agent %s of session %s evicted\n", pos[1], pos[0])
	return nil
}
