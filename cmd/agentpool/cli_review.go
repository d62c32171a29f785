package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// sessionReviewUsage is the synopsis and description of session review.
const sessionReviewUsage = `session review SESSION [--summary TEXT] [--agent ID] [--wait] PATH:LINE TEXT [PATH:LINE TEXT]...
session review SESSION --file FILE [--wait]

Sends comments on lines of the session's diff (session diff, or the page)
to its agent as the next prompt, quoting each file and line with the lines
around it. PATH:LINE is a line of the session's version of the file;
--file reads the whole review as JSON ({"comments": [{"path", "line",
"side": "new"|"old", "text"}], "summary", "agent"}; "-": stdin). Once the
turn has ended, each comment is marked addressed when the turn changed
lines within 2 of it (or deleted the file), or when the agent's reply
names its path:line: session show lists them, --wait prints them.`

// sessionReview runs `session review`.
func (c *cli) sessionReview(ctx context.Context, args []string) error {
	fs := c.flagSet("session review", sessionReviewUsage)
	summary := fs.String("summary", "", "overall `TEXT`, before the comments")
	agent := fs.String("agent", "", "the agent `ID` to send it to (default: the session's active agent)")
	file := fs.String("file", "", "read the review as JSON from `FILE` (\"-\": stdin)")
	wait := fs.Bool("wait", false, "wait for the turn to end and say which comments it addressed")
	asJSON := fs.Bool("json", false, "print the turn as JSON")
	pos, err := c.parse(fs, args, 1, -1)
	if err != nil {
		return err
	}
	req := httpapi.ReviewRequest{Summary: *summary, Agent: *agent}
	if *file != "" {
		if len(pos) > 1 {
			return fmt.Errorf("session review: --file holds the comments; give no PATH:LINE TEXT too")
		}
		var r io.Reader = c.stdin
		if *file != "-" {
			f, err := os.Open(*file)
			if err != nil {
				return fmt.Errorf("session review: %w", err)
			}
			defer f.Close()
			r = f
		}
		dec := json.NewDecoder(r)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return fmt.Errorf("session review: read %s: %w", *file, err)
		}
	} else {
		rest := pos[1:]
		if len(rest) == 0 || len(rest)%2 != 0 {
			return fmt.Errorf("session review: give comments as PATH:LINE TEXT pairs (or --file)")
		}
		for i := 0; i < len(rest); i += 2 {
			path, line, ok := strings.Cut(rest[i], ":")
			n, err := strconv.Atoi(line)
			if !ok || path == "" || err != nil {
				return fmt.Errorf("session review: %q is not PATH:LINE", rest[i])
			}
			req.Comments = append(req.Comments, pool.ReviewComment{Path: path, Line: n, Side: pool.SideNew, Text: rest[i+1]})
		}
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	var after int64
	follow := *wait && !*asJSON
	if follow {
		// The turn is streamed as prompt streams it (its permission
		// requests asked or shown), then its review is judged.
		s, err := api.Session(ctx, pos[0])
		if err != nil {
			return err
		}
		after = s.LastSeq
	}
	t, err := api.Review(ctx, pos[0], req, *wait && !follow)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(t)
	}
	n := len(req.Comments)
	if follow {
		if err := c.followTurn(ctx, api, t.Session, after, t, false); err != nil {
			return err
		}
		if t, err = api.Turn(ctx, t.Session, t.ID, true); err != nil {
			return err
		}
		c.renderReview(t.Review)
		return nil
	}
	if !*wait {
		fmt.Fprintf(c.stdout, "review sent: turn %d of session %s (%d %s)\n", t.ID, t.Session, n, pluralOf(n, "comment", "comments"))
		fmt.Fprintf(c.stdout, "Next: %s session show %s (which comments it addressed, once it has ended)\n", c.self(), t.Session)
		return nil
	}
	fmt.Fprintf(c.stdout, "turn %d ended (%s)\n", t.ID, termText(orText(t.StopReason, t.Error)))
	c.renderReview(t.Review)
	return nil
}

// orText is a, or b when a is empty.
func orText(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

// renderReview prints a review's comments by location, with whether the
// turn addressed each.
func (c *cli) renderReview(r *pool.Review) {
	if r == nil {
		return
	}
	for _, cm := range r.Comments {
		state := "pending"
		switch {
		case cm.Addressed == nil && r.Judged:
		case cm.Addressed == nil:
		case *cm.Addressed:
			state = "addressed (" + cm.AddressedBy + ")"
		default:
			state = "not addressed"
		}
		loc := fmt.Sprintf("%s:%d", cm.Path, cm.Line)
		if cm.Side == pool.SideOld {
			loc += " (old)"
		}
		fmt.Fprintf(c.stdout, "  %-28s %-18s %s\n", loc, state, oneLine(cm.Text, 60))
	}
}

// renderReviews prints the reviews the turns answered.
func (c *cli) renderReviews(turns []pool.Turn) {
	for _, t := range turns {
		if t.Review == nil {
			continue
		}
		fmt.Fprintf(c.stdout, "\nreview answered by turn %d:\n", t.ID)
		c.renderReview(t.Review)
	}
}
