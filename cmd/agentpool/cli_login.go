package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/registry"
	"github.com/agentpool/agentpool/registry/catalog"
)

const loginUsage = `login AGENT [--method ID] [--yes]

Logs an agent in, with one of the ways it offers (see providers list):
  agent      the daemon asks the agent to log in, its own way (it may open
             a browser); the agent keeps the credentials
  terminal   the agent's own program runs here, in your terminal, as you,
             once you have seen the command and said yes
  env_var    says which environment variables the agent reads
The daemon never stores the agent's credentials.`

func (c *cli) loginAgent(ctx context.Context, args []string) error {
	fs := c.flagSet("login", loginUsage)
	method := fs.String("method", "", "the login method's id (default: the agent's only one, or ask)")
	yes := fs.Bool("yes", false, "run a terminal method's command without asking (it is shown first)")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	id := pos[0]
	api, err := c.client()
	if err != nil {
		return err
	}
	snap, err := api.Providers(ctx)
	if err != nil {
		return err
	}
	p, ok := snap.Provider(id)
	if !ok {
		return fmt.Errorf("no provider %q (see: %s providers list)", id, c.self())
	}
	if p.Probe == nil {
		c.progress("asking %s how it logs in… ", id)
		info, err := api.ProbeProvider(ctx, id)
		c.progress("done\n")
		if err != nil && len(info.Auth) == 0 {
			if p2, ok := providerOf(ctx, api, id); ok && p2.Probe != nil {
				p = p2
			}
		} else {
			p.Probe = &info
		}
	}
	if p.Probe != nil && p.Probe.NeedsAuth && len(p.Probe.Auth) == 0 {
		// It needs a login it cannot do over ACP: its own words say how.
		if st, ok := providerOf(ctx, api, id); ok && st.Status == registry.StatusNeedsAuth {
			p = st
		}
		return fmt.Errorf("agent %q needs a login that agentpool cannot do for it: %s", id, termText(p.Diagnostic))
	}
	if p.Probe == nil || len(p.Probe.Auth) == 0 {
		return fmt.Errorf("agent %q offers no login method: it needs none, or logs in on its own (its status: %s)", id, p.Status)
	}
	m, err := c.chooseAuth(id, p.Probe.Auth, *method)
	if err != nil {
		return err
	}
	switch m.Type {
	case backends.AuthAgent:
		c.progress("asking %s to log in with %q (it may open a browser; up to 5 minutes)… ", id, m.Name)
		st, err := api.LoginAgent(ctx, id, m.ID)
		if err != nil {
			c.progress("failed\n")
			return err
		}
		c.progress("done\n")
		return c.loginOutcome(id, st)
	case backends.AuthTerminal:
		return c.loginInTerminal(ctx, api, p, m, *yes)
	case backends.AuthEnvVar:
		fmt.Fprintf(c.stdout, "%s reads its credentials from %s.\n", id, termText(strings.Join(m.Vars, ", ")))
		if m.Link != "" {
			fmt.Fprintf(c.stdout, "Get them at %s.\n", oneLine(m.Link, 300))
		}
		fmt.Fprintf(c.stdout, "Set them in the daemon's environment (then restart it), or in the provider's \"env\" in providers.json; then: %s providers refresh %s\n", c.self(), id)
		var owner []string
		for _, v := range m.Vars {
			if backends.OwnerOnlyEnv(v) && !backends.NeverPassed(v) && !backends.ProxyEnv(v) && !backends.MatchEnv(p.PassEnv, v) {
				owner = append(owner, v)
			}
		}
		if len(owner) > 0 {
			fmt.Fprintf(c.stdout, "From the daemon's environment, the agent gets %s only if the provider's \"pass_env\" names it: the daemon never passes its store's, cloud or forge credentials on an agent's word.\n", termText(strings.Join(owner, ", ")))
		}
		return nil
	}
	return fmt.Errorf("login method %q of agent %q is of a type this client does not know (%q)", m.ID, id, m.Type)
}

// providerOf returns the current status of provider id.
func providerOf(ctx context.Context, api *httpapi.Client, id string) (registry.ProviderStatus, bool) {
	snap, err := api.Providers(ctx)
	if err != nil {
		return registry.ProviderStatus{}, false
	}
	return snap.Provider(id)
}

// chooseAuth picks the login method: the one named, the only one, or one
// the user chooses on a terminal.
func (c *cli) chooseAuth(id string, methods []backends.AuthMethod, name string) (backends.AuthMethod, error) {
	list := make([]string, len(methods))
	for i, m := range methods {
		list[i] = termText(fmt.Sprintf("%s (%s: %s)", m.ID, m.Type, m.Name))
		if name != "" && m.ID == name {
			return m, nil
		}
	}
	switch {
	case name != "":
		return backends.AuthMethod{}, fmt.Errorf("agent %q offers no login method %q; it offers: %s", id, name, strings.Join(list, ", "))
	case len(methods) == 1:
		return methods[0], nil
	case !c.inTTY:
		return backends.AuthMethod{}, fmt.Errorf("agent %q offers several ways to log in; choose one with --method: %s", id, strings.Join(list, ", "))
	}
	fmt.Fprintf(c.stdout, "%s offers these ways to log in:\n", id)
	for i, m := range methods {
		fmt.Fprintf(c.stdout, "  %d. %s", i+1, list[i])
		if m.Description != "" {
			fmt.Fprintf(c.stdout, " — %s", oneLine(m.Description, 200))
		}
		fmt.Fprintln(c.stdout)
	}
	answer := strings.TrimSpace(c.ask("Which one? "))
	if n, err := strconv.Atoi(answer); err == nil && n >= 1 && n <= len(methods) {
		return methods[n-1], nil
	}
	for _, m := range methods {
		if m.ID == answer {
			return m, nil
		}
	}
	return backends.AuthMethod{}, fmt.Errorf("no login method %q", answer)
}

// loginInTerminal runs the agent's own program with the method's
// arguments and environment here, in the user's terminal and as the user
// (as they would by hand), then has the daemon probe the agent again.
func (c *cli) loginInTerminal(ctx context.Context, api *httpapi.Client, p registry.ProviderStatus, m backends.AuthMethod, yes bool) error {
	if p.Path == "" || len(p.Command) == 0 {
		return fmt.Errorf("agent %q is not installed here: %s", p.ID, p.Diagnostic)
	}
	// The arguments and environment are the agent's words, and this runs
	// unconfined, as the user: nothing that makes a program load other
	// code, and the user sees all of it before it runs.
	keys := slices.Sorted(maps.Keys(m.Env))
	for _, k := range keys {
		if loadsCode(k) {
			return fmt.Errorf("agent %q asks to log in with %s set, which makes a program run other code or trust other servers; refused (log in by hand instead)", p.ID, termText(k))
		}
	}
	args := append(append([]string{}, p.Command[1:]...), m.Args...)
	line := quoteArgs(append([]string{p.Path}, args...))
	for i := len(keys) - 1; i >= 0; i-- {
		line = keys[i] + "=" + quoteArgs([]string{m.Env[keys[i]]}) + " " + line
	}
	// Shown escaped: a control character in the agent's words must not
	// hide or rewrite a part of the command on the user's terminal.
	fmt.Fprintf(c.stdout, "to log in (%s), %s asks to run here, in this terminal, as you:\n  %s\n", oneLine(m.Name, 80), p.ID, termLine(line))
	switch {
	case yes:
	case !c.inTTY:
		return fmt.Errorf("not run: check the command above, then run it yourself or again with --yes")
	case !c.confirm("Run it? [y/N] "):
		return fmt.Errorf("not run")
	}
	cmd := exec.CommandContext(ctx, p.Path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	cmd.Env = os.Environ()
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+m.Env[k])
	}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("the login of %q ended with exit code %d", p.ID, exit.ExitCode())
		}
		return fmt.Errorf("log in to %q: %w", p.ID, err)
	}
	c.progress("checking %s… ", p.ID)
	_, _ = api.ProbeProvider(ctx, p.ID)
	c.progress("done\n")
	st, _ := providerOf(ctx, api, p.ID)
	return c.loginOutcome(p.ID, st)
}

// loginOutcome says whether the agent is logged in now.
func (c *cli) loginOutcome(id string, st registry.ProviderStatus) error {
	if st.Status == registry.StatusNeedsAuth {
		return fmt.Errorf("agent %q still needs a login: %s", id, st.Diagnostic)
	}
	fmt.Fprintf(c.stdout, "%s is logged in (status: %s)\n", id, st.Status)
	return nil
}

// loadsCode reports whether an environment variable makes a program (or
// the loader, a shell or an interpreter it starts) run code it names, open
// a program of its choosing, or trust servers of its choosing (see
// catalog.UnsafeEnv): an agent must not get such a variable into a
// command the user runs unconfined.
func loadsCode(name string) bool {
	return catalog.UnsafeEnv(name)
}
