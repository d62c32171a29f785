package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/registry"
	"github.com/agentpool/agentpool/registry/catalog"
)

// catalogFetchTimeout bounds the download of a catalog given by URL.
const catalogFetchTimeout = 30 * time.Second

// catalogListing is one catalog agent as "providers catalog --json" prints
// it: the daemon's entry and whether a provider runs it already.
type catalogListing struct {
	catalog.Entry
	// Configured says a provider with the entry's provider id exists.
	Configured bool `json:"configured"`
}

func (c *cli) providersCatalog(ctx context.Context, args []string) error {
	fs := c.flagSet("providers catalog", "providers catalog [--from FILE|URL] [--json]\n\n"+
		"Lists the agents of the daemon's catalog (the ACP registry's agents): how each\n"+
		"installs, whether agentpool has it built in, whether a provider runs it. With\n"+
		"--from, first replaces the catalog with a registry document (registry.json's\n"+
		"format) read from a file or an http(s) URL by this command, not the daemon; a\n"+
		"document that is not valid is refused whole and the catalog stays.")
	from := fs.String("from", "", "a registry document to use as the catalog: a file, or an http(s) URL")
	asJSON := fs.Bool("json", false, "print the catalog as JSON")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	var view catalog.View
	if *from != "" {
		doc, err := readCatalogSource(ctx, *from)
		if err != nil {
			return fmt.Errorf("providers catalog: %w", err)
		}
		view, err = api.PutCatalog(ctx, doc)
		var ae *httpapi.Error
		if errors.As(err, &ae) && len(ae.Diagnostics) > 0 {
			fmt.Fprintf(c.stderr, "catalog %s refused (the catalog stays as it was):\n", *from)
			for _, d := range ae.Diagnostics {
				if d.Path != "" {
					fmt.Fprintf(c.stderr, "  %s: %s\n", termLine(d.Path), termText(d.Message))
				} else {
					fmt.Fprintf(c.stderr, "  %s\n", termText(d.Message))
				}
			}
			return errors.New("providers catalog: the document is invalid")
		}
		if err != nil {
			return fmt.Errorf("providers catalog: %w", err)
		}
		c.progress("catalog replaced from %s: %d agents\n", *from, len(view.Agents))
	} else if view, err = api.Catalog(ctx); err != nil {
		return err
	}
	snap, err := api.Providers(ctx)
	if err != nil {
		return err
	}
	list := make([]catalogListing, len(view.Agents))
	for i, e := range view.Agents {
		_, ok := snap.Provider(e.Provider)
		list[i] = catalogListing{Entry: e, Configured: ok}
	}
	if *asJSON {
		return c.printJSON(struct {
			catalog.View
			Agents []catalogListing `json:"agents"`
		}{view, list})
	}
	source := "built-in snapshot of the ACP registry"
	if view.Source == catalog.SourceFile {
		source = view.File
	}
	fmt.Fprintf(c.stdout, "catalog: %s (platform %s)\n\n", source, view.Platform)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tVERSION\tINSTALLS\tPROVIDER\tSTATE")
	for _, l := range list {
		how := l.Distribution
		if l.Unavailable != "" {
			how = "n/a"
		}
		state := "-"
		switch {
		case l.BuiltIn:
			state = "built-in"
		case l.Configured:
			state = "configured"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", termLine(l.ID), oneLine(l.Name, 40), oneLine(l.Version, 20), how, termLine(l.Provider), state)
	}
	_ = tw.Flush()
	fmt.Fprintf(c.stdout, "\nAdd one with: %s providers add ID (a built-in needs only its install)\n", c.self())
	return nil
}

// readCatalogSource reads a registry document from a file or an http(s)
// URL, at most catalog.MaxDocument bytes.
func readCatalogSource(ctx context.Context, src string) ([]byte, error) {
	var r io.Reader
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		ctx, cancel := context.WithTimeout(ctx, catalogFetchTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
		if err != nil {
			return nil, fmt.Errorf("fetch %s: %w", src, err)
		}
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("fetch %s: %w", src, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("fetch %s: %s", src, resp.Status)
		}
		r = resp.Body
	} else {
		f, err := os.Open(src)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, catalog.MaxDocument+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", src, err)
	}
	if len(data) > catalog.MaxDocument {
		return nil, fmt.Errorf("%s is larger than %d bytes", src, catalog.MaxDocument)
	}
	return data, nil
}

func (c *cli) providersAdd(ctx context.Context, args []string) error {
	fs := c.flagSet("providers add", "providers add [--id PROVIDER] ID\n\n"+
		"Adds the catalog agent ID (its registry id, or the provider id the catalog\n"+
		"proposes) as a provider: a new entry of providers.json with the agent's command\n"+
		"and environment, written through the API as the web page does. It prints the\n"+
		"step that installs the agent. A built-in agent needs no entry: only its install.")
	as := fs.String("id", "", "the provider id to give it (default: the catalog's proposal)")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	view, err := api.Catalog(ctx)
	if err != nil {
		return err
	}
	var e *catalog.Entry
	for i := range view.Agents {
		if a := &view.Agents[i]; a.ID == pos[0] || a.Provider == pos[0] {
			e = a
			break
		}
	}
	if e == nil {
		return fmt.Errorf("providers add: %q is not in the catalog (list it with: %s providers catalog)", pos[0], c.self())
	}
	if e.BuiltIn && *as == "" {
		fmt.Fprintf(c.stdout, "%s is built in as provider %s: it is ready once installed.\ninstall: %s\n", oneLine(e.Name, 80), termLine(e.Provider), termLine(e.Install))
		return nil
	}
	if e.Unavailable != "" {
		return fmt.Errorf("providers add: %s", e.Unavailable)
	}
	for _, k := range slices.Sorted(maps.Keys(e.Env)) {
		if catalog.UnsafeEnv(k) { // a daemon that does not refuse it itself
			return fmt.Errorf("providers add: the catalog's %s sets %s in the agent's environment, which makes a program run other code or trust other servers; not added (add it to providers.json by hand if you trust it)", oneLine(e.Name, 80), termText(k))
		}
	}
	id := e.Provider
	if *as != "" {
		id = *as
	}
	if err := registry.CheckID(id); err != nil {
		return fmt.Errorf("providers add: %w", err)
	}
	snap, err := api.Providers(ctx)
	if err != nil {
		return err
	}
	if _, ok := snap.Provider(id); ok {
		return fmt.Errorf("providers add: provider %q exists already (choose another with --id)", id)
	}
	entry := map[string]any{"extends": "acp", "label": e.Name, "command": e.Command}
	if len(e.Env) > 0 {
		entry["env"] = e.Env
	}
	patch, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	res, err := api.PatchProvider(ctx, id, patch, snap.ETag)
	if err != nil {
		return fmt.Errorf("providers add %s: %w", id, err)
	}
	status := ""
	if res.Provider != nil {
		status = res.Provider.Status
	}
	// The catalog's words, escaped: a control character in them must not
	// hide a part of what was written on the user's terminal.
	fmt.Fprintf(c.stdout, "added provider %s (%s %s, %s): %s\ncommand: %s\ninstall: %s\n", id, oneLine(e.Name, 80), oneLine(e.Version, 40), e.Distribution,
		status, termLine(quoteArgs(e.Command)), termLine(e.Install))
	if len(e.Env) > 0 {
		var env []string
		for _, k := range slices.Sorted(maps.Keys(e.Env)) {
			env = append(env, k+"="+shellQuote(e.Env[k]))
		}
		fmt.Fprintf(c.stdout, "environment: %s\n", termLine(strings.Join(env, " ")))
	}
	if e.Note != "" {
		fmt.Fprintln(c.stdout, "note: "+termText(e.Note))
	}
	return nil
}
