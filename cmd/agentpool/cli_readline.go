package main

import (
	"bufio"
	"context"
	"fmt"
)

// lineRead is the result of one line read from stdin.
type lineRead struct {
	line string
	err  error
}

// readLine reads a line of the user's answer from stdin. It returns as
// soon as ctx ends (the user pressed Ctrl-C), with ctx's cause, without
// waiting for Enter.
//
// A read from a terminal cannot be interrupted, so the read runs on a
// goroutine of its own: when ctx ends first, the read stays in flight and
// the next readLine takes its line. The process ends soon after an
// interrupt, and with it that goroutine; nothing else reads stdin
// meanwhile.
func (c *cli) readLine(ctx context.Context) (string, error) {
	if c.in == nil {
		c.in = bufio.NewReader(c.stdin)
	}
	if c.reading == nil {
		ch := make(chan lineRead, 1)
		in := c.in
		go func() {
			line, err := in.ReadString('\n')
			ch <- lineRead{line, err}
		}()
		c.reading = ch
	}
	select {
	case r := <-c.reading:
		c.reading = nil
		return r.line, r.err
	case <-ctx.Done():
		return "", fmt.Errorf("read answer: %w", context.Cause(ctx))
	}
}
