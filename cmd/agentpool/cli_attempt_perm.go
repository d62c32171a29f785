package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentpool/agentpool/attempts"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/permission"
)

// attemptPollEvery is how often `attempt --wait` looks at a set again
// while every permission request it waits for has been shown, and is
// answered elsewhere (the daemon's wait returns at once while one waits).
const attemptPollEvery = time.Second

// askAttempts shows the permission requests the attempts of set wait for
// that seen does not hold yet, and asks each on a terminal as prompt does
// (else says the command that answers it); it returns how many it showed.
func (c *cli) askAttempts(ctx context.Context, api *httpapi.Client, set attempts.Set, seen map[string]bool, r *renderer) int {
	n := 0
	for _, a := range set.Attempts {
		for _, pd := range a.PendingPermissions {
			if seen[pd.ID] {
				continue
			}
			seen[pd.ID] = true
			n++
			r.endText()
			r.line(r.out, "", "attempt %s (%s) waits for a permission answer:", a.Session, termLine(a.Agent))
			ev := pendingEvent(a.Session, pd)
			r.event(ev)
			if left := time.Until(pd.Deadline); left > 0 {
				r.line(r.out, "", "  unanswered, it is rejected in %s", left.Round(time.Second))
			}
			c.askPermission(ctx, api, a.Session, decodeData(ev), r, r.out)
		}
	}
	return n
}

// pendingEvent is the permission.requested event of pd, as the session's
// stream carried it, for the renderer and the question of prompt.
func pendingEvent(session string, pd permission.Pending) backends.Event {
	r := pd.Request
	return backends.Event{Type: backends.EventPermissionRequest, Session: session, Agent: r.Agent, Turn: r.Turn, Data: backends.MustJSON(map[string]any{
		"request": pd.ID, "tool_call_id": r.ToolCallID, "title": r.Title, "kind": r.ToolKind, "action": r.Action,
		"locations": r.Locations, "raw_input": r.RawInput, "options": r.Options, "risk": pd.Risk, "deadline": pd.Deadline,
	})}
}

// pendingIDs are the ids of the permission requests set's attempts wait
// for.
func pendingIDs(set attempts.Set) []string {
	var ids []string
	for _, a := range set.Attempts {
		for _, pd := range a.PendingPermissions {
			ids = append(ids, pd.ID)
		}
	}
	return ids
}

// renderPending says, for each permission request set's attempts wait
// for, the command that answers it.
func (c *cli) renderPending(w io.Writer, set attempts.Set) {
	for _, a := range set.Attempts {
		for _, pd := range a.PendingPermissions {
			d := decodeData(pendingEvent(a.Session, pd))
			fmt.Fprintf(w, "%s waits for a permission answer: %s\n  answer: %s permissions answer %s %s %s\n", a.Session,
				termLine(permissionSummary(d)), c.self(), a.Session, termLine(pd.ID), strings.Join(offeredKinds(d), "|"))
		}
	}
}
