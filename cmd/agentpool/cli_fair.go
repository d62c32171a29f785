package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/agentpool/agentpool/pool"
)

// renderWriteQueues prints, after a blank line, the sessions with events
// in the store's write queue or whose agent was held waiting for room
// there: nothing when there are none.
func (c *cli) renderWriteQueues(qs []pool.WriteQueue) {
	if len(qs) == 0 {
		return
	}
	fmt.Fprintln(c.stdout)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tQUEUED\tBYTES\tOLDEST\tHELD\tHOLDS\tPACED\tSLOWED\tEPISODES")
	for _, q := range qs {
		slowed := "-"
		if q.Slowed {
			slowed = "now"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%d\n", q.Session, q.Events, formatQueueBytes(q.Bytes),
			roundWait(q.Oldest), roundWait(q.Held), q.Holds, roundWait(q.Paced), slowed, q.Episodes)
	}
	_ = tw.Flush()
}

// formatQueueBytes formats a count of bytes in B, KiB or MiB.
func formatQueueBytes(n int64) string {
	switch {
	case n <= 0:
		return "0"
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// roundWait rounds a wait for display ("-" for none).
func roundWait(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}
