package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/pool"
)

// agentpool ps shows the sessions with events in the store's write queue
// after the agents: what is queued, the oldest one's wait, how long the
// agent was held, and whether it is being slowed now.
func TestPsShowsWriteQueues(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stdout: &out, stderr: &out}
	c.renderWriteQueues([]pool.WriteQueue{
		{Session: "s-flood", Events: 7000, Bytes: 2 << 20, Oldest: 250 * time.Millisecond, Slowed: true,
			Held: 1500 * time.Millisecond, Holds: 40, Episodes: 1, Paced: 3200 * time.Millisecond},
		{Session: "s-quick", Events: 1, Bytes: 300},
	})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("ps printed %q; want a header and two rows", out.String())
	}
	for i, want := range [][]string{
		{"SESSION", "QUEUED", "BYTES", "OLDEST", "HELD", "HOLDS", "PACED", "SLOWED", "EPISODES"},
		{"s-flood", "7000", "2.0 MiB", "250ms", "1.5s", "40", "3.2s", "now", "1"},
		{"s-quick", "1", "300 B", "-", "-", "0", "-", "-", "0"},
	} {
		if strings.Join(strings.Fields(lines[i]), " ") != strings.Join(want, " ") {
			t.Errorf("row %d = %q; want %q", i, lines[i], want)
		}
	}
	out.Reset()
	c.renderWriteQueues(nil)
	if out.Len() != 0 {
		t.Errorf("ps printed %q with nothing queued; want nothing", out.String())
	}
}
