package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/registry"
)

const providersUsage = `  list                  list the providers and their status
  enable ID...          enable providers (a merge patch of providers.json)
  disable ID...         disable providers
  remove ID...          remove custom providers from providers.json
  refresh [--probe] [ID...]  read providers.json again; probe the given agents
  catalog [--from FILE|URL] [--json]  list the agents to add (the ACP registry); --from replaces the catalog
  add [--id PROVIDER] ID  add a catalog agent as a provider and print its install step
`

func (c *cli) providers(ctx context.Context, args []string) error {
	sub, args, err := c.subcommand("providers", providersUsage, args)
	if err != nil {
		return err
	}
	switch sub {
	case "catalog": // cli_catalog.go
		return c.providersCatalog(ctx, args)
	case "add":
		return c.providersAdd(ctx, args)
	case "list", "ls":
		return c.providersList(ctx, args)
	case "enable", "disable":
		return c.providersEnable(ctx, sub, args)
	case "refresh":
		return c.providersRefresh(ctx, args)
	case "remove", "rm":
		return c.providersRemove(ctx, args)
	}
	return fmt.Errorf("providers: unknown command %q (want list, enable, disable, remove or refresh)", sub)
}

func (c *cli) providersList(ctx context.Context, args []string) error {
	fs := c.flagSet("providers list", "providers list [--json]\n\nLists every provider: built-in and from providers.json, with its status, how\nthe machine confines its agents, and the connections they were refused.")
	asJSON := fs.Bool("json", false, "print the daemon's answer as JSON (the snapshot and the confinement)")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	list, err := api.ProviderList(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(list)
	}
	c.confine = confinementOf(list.Confinement)
	if c.confine == nil {
		c.confine = c.confinement(ctx, api) // a daemon that says it in GET /v1/health only
	}
	c.renderProviders(list.Snapshot)
	return nil
}

// confinement asks the daemon how it confines agents; nil if it does not
// say (an older daemon).
func (c *cli) confinement(ctx context.Context, api *httpapi.Client) *sandbox.Status {
	h, err := api.Health(ctx)
	if err != nil {
		return nil
	}
	return confinementOf(h.Confinement)
}

// confinementOf reads the confinement of a daemon's answer; nil if it
// says none.
func confinementOf(v any) *sandbox.Status {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var st sandbox.Status
	if json.Unmarshal(b, &st) != nil || st.Containment == "" {
		return nil
	}
	return &st
}

// renderProviders prints a snapshot as a table.
func (c *cli) renderProviders(snap registry.Snapshot) {
	if snap.Diagnostic != "" {
		fmt.Fprintf(c.stdout, "providers file %s is rejected (the last good config stays in force):\n  %s\n\n",
			snap.File, strings.ReplaceAll(snap.Diagnostic, "\n", "\n  "))
	}
	c.renderConfinement() // cli_confinement.go
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tENABLED\tSTATUS\tSANDBOX\tDETAIL")
	missing := 0
	for _, p := range snap.Providers {
		detail := p.Diagnostic
		if detail == "" {
			detail = strings.Join(p.Command, " ")
			if p.Path != "" && len(p.Command) > 0 && p.Path != p.Command[0] {
				detail = p.Path + " " + strings.Join(p.Command[1:], " ")
			}
		}
		if p.Status == registry.StatusNotInstalled {
			missing++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Kind, yesNo(p.Enabled), p.Status, sandboxLabel(p.Sandbox, c.confine), termText(strings.TrimSpace(detail)))
	}
	_ = tw.Flush()
	c.renderSandboxNotes(snap)
	c.renderNetworkRefused(snap) // cli_confinement.go
	c.renderEnvNotes(snap)
	if missing > 0 {
		// The PATH once, here, rather than on every row: it is the
		// daemon's, which may differ from this shell's.
		fmt.Fprintf(c.stdout, "\nnot_installed: the agent's command is not on the daemon's PATH. Install the agent (see\n"+
			"docs/agents.md) and it is ready at once, or give its \"command\" an absolute path in %s.\n", displayFile(snap.File))
		if snap.PathEnv != "" {
			fmt.Fprintf(c.stdout, "searched PATH: %s\n", snap.PathEnv)
		}
	}
}

// displayFile is the providers file to name in a hint.
func displayFile(file string) string {
	if file == "" {
		return "providers.json"
	}
	return file
}

// checkAgent refuses, before anything is created, an agent the daemon
// does not know or has disabled, saying what to do. The daemon checks
// again; this only gives the message first, with the command to type. An
// agent not installed is left to the daemon, which looks it up again. It
// returns the agent's status as the daemon last saw it ("" when unknown).
func (c *cli) checkAgent(ctx context.Context, api *httpapi.Client, id string) (string, error) {
	snap, err := api.Providers(ctx)
	if err != nil {
		return "", nil // the request that follows reports the problem
	}
	p, err := snap.Lookup(id)
	if err != nil {
		return "", err
	}
	if !p.Enabled {
		return p.Status, fmt.Errorf("provider %q is disabled (enable with: %s providers enable %s)", id, c.self(), id)
	}
	return p.Status, nil
}

func (c *cli) providersEnable(ctx context.Context, verb string, args []string) error {
	fs := c.flagSet("providers "+verb, "providers "+verb+" ID...\n\nSets \"enabled\" of each provider in providers.json through the API (a JSON\nMerge Patch guarded by the file's ETag): other fields and hand edits stay,\nand the daemon applies the change at once.")
	ids, err := c.parse(fs, args, 1, -1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	for _, id := range ids {
		res, err := api.SetProviderEnabled(ctx, id, verb == "enable")
		if err != nil {
			return fmt.Errorf("%s %s: %w", verb, id, err)
		}
		fmt.Fprintf(c.stdout, "%s %sd", id, verb)
		if p := res.Provider; p != nil && p.Status != registry.StatusDisabled {
			fmt.Fprintf(c.stdout, "; status %s", p.Status)
			if p.Diagnostic != "" {
				fmt.Fprintf(c.stdout, ": %s", termText(p.Diagnostic))
			}
		}
		fmt.Fprintln(c.stdout)
	}
	return nil
}

func (c *cli) providersRemove(ctx context.Context, args []string) error {
	fs := c.flagSet("providers remove", "providers remove ID...\n\nDeletes each custom provider's entry from providers.json through the API;\nthe daemon applies the change at once. Built-in providers cannot be removed,\nonly disabled. Sessions whose agent it was keep a running agent, but the\nprovider cannot start again for them.")
	ids, err := c.parse(fs, args, 1, -1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := api.RemoveProvider(ctx, id); err != nil {
			return fmt.Errorf("remove %s: %w", id, err)
		}
		fmt.Fprintf(c.stdout, "%s removed\n", id)
	}
	return nil
}

func (c *cli) providersRefresh(ctx context.Context, args []string) error {
	fs := c.flagSet("providers refresh", "providers refresh [--probe] [ID...]\n\nReads providers.json again and looks every command up in PATH again. With IDs\n(or --probe for every ready ACP provider), also starts each agent once to\nlearn what it offers.")
	probeAll := fs.Bool("probe", false, "probe every enabled, ready ACP provider")
	ids, err := c.parse(fs, args, 0, -1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	snap, err := api.RefreshProviders(ctx)
	var ae *httpapi.Error
	if errors.As(err, &ae) && ae.Code == httpapi.CodeInvalidConfig {
		fmt.Fprintf(c.stderr, "providers file rejected (the last good config stays in force):\n")
		for _, d := range ae.Diagnostics {
			fmt.Fprintf(c.stderr, "  %s:%d:%d: %s: %s\n", d.File, d.Line, d.Col, termLine(d.Path), termText(d.Message))
		}
		if len(ae.Diagnostics) == 0 {
			fmt.Fprintf(c.stderr, "  %s\n", termText(ae.Message))
		}
		return errors.New("providers refresh: the providers file is invalid")
	}
	if err != nil {
		return err
	}
	if *probeAll && len(ids) == 0 {
		for _, p := range snap.Providers {
			if p.Enabled && p.Status == registry.StatusReady && p.Kind == backends.KindACP {
				ids = append(ids, p.ID)
			}
		}
	}
	if len(ids) == 0 {
		c.confine = confinementOf(snap.Confinement)
		c.renderProviders(snap.Snapshot)
		return nil
	}
	failed := 0
	for _, id := range ids {
		c.progress("probing %s… ", id)
		start := time.Now()
		info, err := api.ProbeProvider(ctx, id)
		switch {
		case err != nil:
			failed++
			c.progress("failed: %v\n", err)
		case info.Error != "":
			failed++
			c.progress("failed: %s\n", info.Error)
		default:
			c.progress("ok\n")
			fmt.Fprintf(c.stdout, "%s: %s %s, protocol %d, load_session %v, %d modes (%.1fs)\n", id, oneLine(info.AgentName, 60), oneLine(info.AgentVersion, 30),
				info.ProtocolVersion, info.LoadSession, len(info.Modes), time.Since(start).Seconds())
		}
	}
	if failed > 0 {
		return fmt.Errorf("providers refresh: %d of %d probes failed", failed, len(ids))
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// daemonDefaultAgent is the agent of a session created without one: the
// providers file's "default_agent", else demo.
func (c *cli) daemonDefaultAgent(ctx context.Context, api *httpapi.Client) string {
	if snap, err := api.Providers(ctx); err == nil && snap.DefaultAgent != "" {
		return snap.DefaultAgent
	}
	return httpapi.FallbackAgent
}
