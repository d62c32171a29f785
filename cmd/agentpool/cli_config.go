package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// configUsage is the part of sessionUsage for the agent config commands.
const configUsage = `  config SESSION [KEY VALUE] [--agent A]      list the agent's config options (model, ...), or set one
  mode SESSION [MODE] [--agent A]             list the agent's session modes, or switch to one
  commands SESSION [--agent A]                list the agent's slash commands
`

// agentOf returns agent, or the session's active agent when it is "".
func agentOf(ctx context.Context, api *httpapi.Client, session, agent string) (string, error) {
	if agent != "" {
		return agent, nil
	}
	s, err := api.Session(ctx, session)
	if err != nil {
		return "", err
	}
	return s.ActiveAgent, nil
}

// notKnown is the line printed for an agent that never advertised.
func notKnown(c pool.AgentConfig) string {
	return fmt.Sprintf("agent %s has not started in session %s yet: nothing is known of what it offers (send a prompt first)", c.Agent, c.Session)
}

func (c *cli) sessionConfig(ctx context.Context, args []string) error {
	fs := c.flagSet("session config", "session config SESSION [KEY VALUE] [--agent A] [--json]\n\n"+
		"Without KEY, lists the session config options the agent offers (model, reasoning level, ...)\n"+
		"with their current values and choices. With KEY VALUE, sets option KEY (an option id or\n"+
		"category, e.g. model) to VALUE: at once when the agent runs, else at its next start; the\n"+
		"choice is re-applied whenever the agent restarts.")
	agent := fs.String("agent", "", "the agent (default: the session's active agent)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := c.parse(fs, args, 1, 3)
	if err != nil {
		return err
	}
	if len(pos) == 2 {
		return fmt.Errorf("session config: give both KEY and VALUE (or neither, to list)")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	a, err := agentOf(ctx, api, pos[0], *agent)
	if err != nil {
		return err
	}
	if len(pos) == 3 {
		res, err := api.SetAgentConfig(ctx, pos[0], a, httpapi.ConfigChange{Options: map[string]string{pos[1]: pos[2]}})
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(res)
		}
		fmt.Fprintf(c.stdout, "%s %s = %s: %s\n", a, pos[1], pos[2], termText(res.Note))
		return nil
	}
	cfg, err := api.AgentConfig(ctx, pos[0], a)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(cfg)
	}
	if !cfg.Known {
		fmt.Fprintln(c.stdout, notKnown(cfg))
		return nil
	}
	if len(cfg.Options) == 0 {
		fmt.Fprintf(c.stdout, "agent %s offers no config options\n", a)
		return nil
	}
	return renderOptions(c.stdout, cfg.Options)
}

// renderOptions writes the table of an agent's config options; every
// cell is the agent's words, shown escaped.
func renderOptions(w io.Writer, opts []backends.ConfigOption) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPTION\tCATEGORY\tCURRENT\tCHOICES")
	for _, o := range opts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", termLine(o.ID), termLine(dash(o.Category)), termLine(o.Current), termLine(strings.Join(o.Values(), ", ")))
	}
	return tw.Flush()
}

func (c *cli) sessionMode(ctx context.Context, args []string) error {
	fs := c.flagSet("session mode", "session mode SESSION [MODE] [--agent A] [--json]\n\n"+
		"Without MODE, lists the session modes the agent offers, the current one marked *.\n"+
		"With MODE, switches to it: at once when the agent runs, else at its next start; the\n"+
		"choice is re-applied whenever the agent restarts.")
	agent := fs.String("agent", "", "the agent (default: the session's active agent)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := c.parse(fs, args, 1, 2)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	a, err := agentOf(ctx, api, pos[0], *agent)
	if err != nil {
		return err
	}
	if len(pos) == 2 {
		res, err := api.SetAgentConfig(ctx, pos[0], a, httpapi.ConfigChange{Mode: pos[1]})
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(res)
		}
		fmt.Fprintf(c.stdout, "%s mode %s: %s\n", a, pos[1], termText(res.Note))
		return nil
	}
	cfg, err := api.AgentConfig(ctx, pos[0], a)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(cfg.Modes)
	}
	if !cfg.Known {
		fmt.Fprintln(c.stdout, notKnown(cfg))
		return nil
	}
	modes, current := cfg.Modes.Available, cfg.Modes.Current
	if o, ok := (backends.Advertised{Options: cfg.Options}).Option(pool.ModeKey); ok && len(modes) == 0 {
		// The agent offers its modes as a config option.
		for _, ch := range o.Choices {
			modes = append(modes, backends.Mode{ID: ch.Value, Name: ch.Name, Description: ch.Description})
		}
		current = o.Current
	}
	if len(modes) == 0 {
		fmt.Fprintf(c.stdout, "agent %s offers no session modes\n", a)
		return nil
	}
	return renderModes(c.stdout, modes, current)
}

// renderModes writes the table of an agent's session modes, current
// marked *; every cell is the agent's words, shown escaped.
func renderModes(w io.Writer, modes []backends.Mode, current string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tMODE\tNAME\tDESCRIPTION")
	for _, m := range modes {
		mark := ""
		if m.ID == current {
			mark = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", mark, termLine(m.ID), termLine(m.Name), oneLine(m.Description, 60))
	}
	return tw.Flush()
}

func (c *cli) sessionCommands(ctx context.Context, args []string) error {
	fs := c.flagSet("session commands", "session commands SESSION [--agent A] [--json]\n\n"+
		"Lists the slash commands the agent last announced, with their input hints.\n"+
		"Send one as a prompt: agentpool prompt SESSION \"/name input\".")
	agent := fs.String("agent", "", "the agent (default: the session's active agent)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	a, err := agentOf(ctx, api, pos[0], *agent)
	if err != nil {
		return err
	}
	l, err := api.AgentCommands(ctx, pos[0], a)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(l)
	}
	if !l.Known {
		fmt.Fprintln(c.stdout, notKnown(pool.AgentConfig{Session: l.Session, Agent: l.Agent}))
		return nil
	}
	if len(l.Commands) == 0 {
		fmt.Fprintf(c.stdout, "agent %s announced no slash commands\n", a)
		return nil
	}
	return renderCommands(c.stdout, l.Commands)
}

// renderCommands writes the table of an agent's slash commands; every
// cell is the agent's words, shown escaped.
func renderCommands(w io.Writer, cmds []backends.Command) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMMAND\tINPUT\tDESCRIPTION")
	for _, cmd := range cmds {
		fmt.Fprintf(tw, "/%s\t%s\t%s\n", termLine(cmd.Name), termLine(dash(hintOf(cmd))), oneLine(cmd.Description, 70))
	}
	return tw.Flush()
}

func hintOf(c backends.Command) string {
	if c.Hint == "" {
		return ""
	}
	return "<" + c.Hint + ">"
}

// dash is s, or "-" when s is empty, for a table cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
