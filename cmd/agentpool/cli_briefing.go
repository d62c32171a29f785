package main

import (
	"encoding/json"
	"fmt"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// briefingLine is a turn.briefing folded to one line: to whom, what it
// covers, what was cut, its size and how it was sent; its text stays in
// the event (agentpool events --json, the page).
func briefingLine(ev backends.Event) string {
	var d pool.BriefingData
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		return "briefing (unreadable)"
	}
	what := "full history"
	if d.Kind == "since" {
		what = fmt.Sprintf("since its turn %d", d.Since)
	}
	s := fmt.Sprintf("briefing for %s (%s): %s", termText(d.Agent), what, turnSpan(d.Turns))
	if len(d.Cut) > 0 {
		s += fmt.Sprintf(", %d older cut", len(d.Cut))
	}
	return s + fmt.Sprintf(", %s as %s [folded]", byteSize(d.Bytes), termText(d.Delivery))
}

// turnSpan names a briefing's turns: "turn 3", "turns 1–4".
func turnSpan(ids []int64) string {
	switch len(ids) {
	case 0:
		return "no turn"
	case 1:
		return fmt.Sprintf("turn %d", ids[0])
	}
	return fmt.Sprintf("%d turns (%d–%d)", len(ids), ids[0], ids[len(ids)-1])
}

// byteSize is n bytes, readable: "812 B", "12.3 KiB".
func byteSize(n int) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/1024)
}
