package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
)

// cancelTimeout bounds the cancel sent when the prompt command is interrupted.
const cancelTimeout = 30 * time.Second

func (c *cli) prompt(ctx context.Context, args []string) error {
	fs := c.flagSet("prompt", `prompt SESSION [--agent ID] [--json] TEXT...

Sends TEXT to the session's agent (or --agent's, which then becomes the
session's active agent) and streams the turn: the agent's text as it comes,
tool calls and permission requests as one line each. On a terminal, a
permission request is asked as a y/n question; otherwise the command says
how to answer it and waits. TEXT "-" (or none, with stdin not a terminal)
reads the prompt from stdin. Interrupting the command cancels the turn.
The exit status is non-zero when the turn ends in error, refusal, timeout
or cancellation.`)
	agent := fs.String("agent", "", "the agent to prompt (default: the session's active agent)")
	asJSON := fs.Bool("json", false, "print the turn's events as JSON lines")
	pos, err := c.parse(fs, args, 1, -1)
	if err != nil {
		return err
	}
	session, text := pos[0], strings.Join(pos[1:], " ")
	if text == "-" || (text == "" && !c.inTTY) {
		b, err := io.ReadAll(c.stdin)
		if err != nil {
			return fmt.Errorf("prompt: read stdin: %w", err)
		}
		text = string(b)
	}
	if strings.TrimSpace(text) == "" {
		fs.Usage()
		return errors.New("prompt: no text")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	s, err := api.Session(ctx, session)
	if err != nil {
		return err
	}
	if *agent != "" {
		if _, err := c.checkAgent(ctx, api, *agent); err != nil {
			return err
		}
	}
	t, err := api.Prompt(ctx, session, *agent, text, false)
	if err != nil {
		return err
	}
	if t.QueuePosition > 0 {
		c.progress("every agent slot is busy: turn %d waits at position %d in the queue\n", t.ID, t.QueuePosition)
	}
	return c.followTurn(ctx, api, session, s.LastSeq, t, *asJSON)
}

// followTurn streams turn t of session from seq after until it ends.
func (c *cli) followTurn(ctx context.Context, api *httpapi.Client, session string, after int64, t pool.Turn, asJSON bool) error {
	r := newRenderer(c.stdout, c.stderr, c.outTTY)
	setup := &setupWait{r: r, self: c.self(), session: session} // cli_setupwait.go
	var end *eventData
	// A young session's events before the prompt tell whether its setup
	// is still running, which the turn waits for (a setup runs when the
	// session is created, or later on request, which then shows only
	// from its next event on).
	from := after
	if after <= setupLookback {
		from = 0
	}
	err := api.Events(ctx, session, from, func(ev backends.Event) error {
		if ev.Seq <= after {
			if isSetupEvent(ev) && !asJSON {
				setup.before(ev, ev.Seq == after)
			}
			return nil
		}
		if isSetupEvent(ev) {
			if asJSON {
				b, _ := json.Marshal(ev)
				fmt.Fprintf(c.stdout, "%s\n", b)
			} else {
				setup.event(ev)
			}
			return nil
		}
		if !partOfTurn(ev, t) {
			return nil
		}
		if asJSON {
			b, _ := json.Marshal(ev)
			fmt.Fprintf(c.stdout, "%s\n", b)
		} else {
			r.event(ev)
		}
		switch ev.Type {
		case pool.EventTurnDequeued:
			c.progress("turn %d got an agent slot\n", t.ID)
		case backends.EventPermissionRequest:
			w := c.stdout
			if asJSON {
				w = c.stderr // keep stdout JSON
			}
			c.askPermission(ctx, api, session, decodeData(ev), r, w)
			if ctx.Err() != nil {
				return context.Cause(ctx) // interrupted at the question
			}
		case backends.EventTurnEnded:
			d := decodeData(ev)
			end = &d
			return httpapi.ErrStop
		}
		return nil
	})
	switch {
	case end != nil:
	case ctx.Err() != nil:
		r.endText()
		c.progress("interrupted: cancelling turn %d… ", t.ID)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
		defer cancel()
		if cerr := api.Cancel(cctx, session); cerr != nil && !httpapi.IsCode(cerr, httpapi.CodeNoTurn) {
			c.progress("failed: %v\n", cerr)
		} else {
			c.progress("done\n")
		}
		return fmt.Errorf("turn %d cancelled", t.ID)
	case err == nil:
		return fmt.Errorf("session %s was closed during turn %d", session, t.ID)
	default:
		return err
	}
	if end.Changes != nil && end.Changes.Files > 0 && !asJSON {
		fmt.Fprintf(c.stdout, "see the changes: %s diff %s --turn %d\n", c.self(), session, t.ID)
	}
	if turnFailed(end.StopReason) {
		return fmt.Errorf("turn %d ended: %s", t.ID, end.StopReason)
	}
	return nil
}

// partOfTurn says whether ev belongs on the screen of turn t: its own
// events, and the life-cycle of its agent.
func partOfTurn(ev backends.Event, t pool.Turn) bool {
	if ev.Turn != 0 {
		return ev.Turn == t.ID
	}
	return ev.Agent == t.Agent && (strings.HasPrefix(string(ev.Type), "agent.") || ev.Type == backends.EventError)
}

// askPermission asks a question for a permission request when stdin is a
// terminal, and otherwise says on w how to answer it. The choices are
// labelled by the daemon from the options' kinds, never by the agent's
// names for them (shown after, as the agent's words); an empty answer
// rejects, and "always allow" must be typed out as "a" or "always".
func (c *cli) askPermission(ctx context.Context, api *httpapi.Client, session string, d eventData, r *renderer, w io.Writer) {
	offered := offeredKinds(d)
	if !c.inTTY {
		r.line(w, "", "  waiting for an answer: %s permissions answer %s %s %s", c.self(), session, d.Request, strings.Join(offered, "|"))
		return
	}
	for _, o := range d.Options {
		if label := kindLabel(o.Kind); o.Name != "" && !sameWords(o.Name, label) {
			r.line(w, "", "  the agent calls %q: %s", oneLine(o.Name, 60), label)
		}
	}
	q := "  " + permissionQuestion(offered)
	for {
		fmt.Fprintf(w, "%s: ", q)
		line, err := c.readLine(ctx)
		if ctx.Err() != nil {
			// Interrupted at the question: the caller cancels the turn.
			fmt.Fprintln(w)
			return
		}
		choice, ok := permissionChoice(strings.TrimSpace(line))
		if err != nil && line == "" {
			choice, ok = permission.KindRejectOnce, true // end of input: refuse
		}
		if choice == permission.KindRejectOnce && !slices.Contains(offered, choice) {
			choice = string(permission.DecisionDeny) // whichever rejection the agent offers
		}
		if !ok || (choice != string(permission.DecisionDeny) && !slices.Contains(offered, choice)) {
			continue
		}
		if aerr := api.Answer(ctx, session, d.Request, choice); aerr != nil {
			if httpapi.IsCode(aerr, httpapi.CodeUnknownRequest) {
				fmt.Fprintln(w, "  (already answered elsewhere or timed out)")
				return
			}
			fmt.Fprintf(c.stderr, "answer: %v\n", aerr)
		}
		return
	}
}

// sameWords says whether an agent's name for an option says nothing the
// daemon's label does not ("Allow" for "Allow once"), so it need not be
// repeated; any other name is shown as the agent's.
func sameWords(said, label string) bool {
	split := func(s string) []string {
		return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	}
	have := split(label)
	for _, w := range split(said) {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// permissionKinds are the option kinds in the order the CLI and the page
// offer them.
var permissionKinds = []string{permission.KindAllowOnce, permission.KindAllowAlways, permission.KindRejectOnce, permission.KindRejectAlways}

// kindLabel says what choosing an option of kind k does, in the daemon's
// words (the page uses the same).
func kindLabel(k string) string {
	switch k {
	case permission.KindAllowOnce:
		return "Allow once"
	case permission.KindAllowAlways:
		return "Always allow in this session"
	case permission.KindRejectOnce:
		return "Reject"
	case permission.KindRejectAlways:
		return "Always reject"
	}
	return "unknown choice " + strconv.Quote(k)
}

// offeredKinds lists the known kinds of d's options in the CLI's order:
// allow_once and reject_once when the request names none.
func offeredKinds(d eventData) []string {
	has := map[string]bool{}
	for _, o := range d.Options {
		has[o.Kind] = true
	}
	if len(d.Options) == 0 {
		has[permission.KindAllowOnce], has[permission.KindRejectOnce] = true, true
	}
	var out []string
	for _, k := range permissionKinds {
		if has[k] {
			out = append(out, k)
		}
	}
	return out
}

// permissionQuestion is the prompt for the offered kinds, e.g.
// "Allow once [y] · Always allow in this session [a] · Reject [N]"; the
// default (an empty answer) is always a rejection.
func permissionQuestion(offered []string) string {
	keys := map[string]string{permission.KindAllowOnce: "y", permission.KindAllowAlways: "a",
		permission.KindRejectOnce: "N", permission.KindRejectAlways: "r"}
	var parts []string
	for _, k := range offered {
		parts = append(parts, fmt.Sprintf("%s [%s]", kindLabel(k), keys[k]))
	}
	if !slices.Contains(offered, permission.KindRejectOnce) {
		parts = append(parts, "Reject [N]")
	}
	return strings.Join(parts, " · ")
}

// permissionChoice maps a typed answer to an option kind.
func permissionChoice(s string) (string, bool) {
	switch strings.ToLower(s) {
	case "y", "yes":
		return permission.KindAllowOnce, true
	case "a", "always":
		return permission.KindAllowAlways, true
	case "n", "no", "":
		return permission.KindRejectOnce, true
	case "r", "never":
		return permission.KindRejectAlways, true
	}
	return "", false
}
