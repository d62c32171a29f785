package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// usageCmd: agentpool usage [--session S] [--json].
func (c *cli) usageCmd(ctx context.Context, args []string) error {
	fs := c.flagSet("usage", "usage [--session SESSION] [--json]\n\nShows what agents used: tokens (from each turn's answer), cost (the latest\ncumulative cost each agent session reported, summed; currencies are kept\napart) and context occupancy, per provider with its budget and per session.\nWith --session, one session in detail.")
	session := fs.String("session", "", "show this session only")
	asJSON := fs.Bool("json", false, "print as JSON")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	if *session != "" {
		su, err := api.SessionUsage(ctx, *session)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(su)
		}
		c.renderSessionUsage(c.stdout, su)
		return nil
	}
	rep, err := api.Usage(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(rep)
	}
	if len(rep.Providers) == 0 {
		fmt.Fprintln(c.stdout, "no usage reported yet (agents report it with their turns; some agents report none)")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tSESSIONS\tTURNS\tTOKENS\tIN\tOUT\tCOST\tBUDGET")
	for _, p := range rep.Providers {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", p.Provider, p.Sessions, p.Turns, p.Tokens.Total,
			p.Tokens.Input, p.Tokens.Output, moneyList(p.Cost), budgetText(p.Budget))
	}
	_ = tw.Flush()
	fmt.Fprintln(c.stdout, "\nsessions:")
	tw = tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tTURNS\tTOKENS\tCOST\tCONTEXT\tBUDGET")
	for _, s := range rep.Sessions {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", s.Session, s.Turns, s.Tokens.Total, moneyList(s.Cost), contextOf(s), budgetText(s.Budget))
	}
	_ = tw.Flush()
	return nil
}

// renderSessionUsage prints a session's usage: totals, per agent, budget.
func (c *cli) renderSessionUsage(w io.Writer, su pool.SessionUsage) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "tokens\t%d (in %d, out %d", su.Tokens.Total, su.Tokens.Input, su.Tokens.Output)
	if su.Tokens.CachedRead > 0 {
		fmt.Fprintf(tw, ", cached %d", su.Tokens.CachedRead)
	}
	if su.Tokens.Thought > 0 {
		fmt.Fprintf(tw, ", thought %d", su.Tokens.Thought)
	}
	fmt.Fprintf(tw, ") over %d turns\n", su.Turns)
	fmt.Fprintf(tw, "cost\t%s\n", moneyList(su.Cost))
	fmt.Fprintf(tw, "budget\t%s\n", budgetText(su.Budget))
	if note := otherCurrencyNote(su.Budget, su.Cost); note != "" {
		fmt.Fprintf(tw, "\t%s\n", note)
	}
	_ = tw.Flush()
	if len(su.Agents) == 0 {
		return
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tTURNS\tTOKENS\tCOST\tCONTEXT")
	for _, a := range su.Agents {
		ctxt := "-"
		if a.Context != nil {
			ctxt = contextText(*a.Context)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", a.Agent, a.Turns, a.Tokens.Total, moneyList(a.Cost), ctxt)
	}
	_ = tw.Flush()
}

// contextOf returns the context occupancy of a session's agents.
func contextOf(s pool.SessionUsage) string {
	var parts []string
	for _, a := range s.Agents {
		if a.Context != nil {
			parts = append(parts, a.Agent+" "+contextText(*a.Context))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func contextText(c pool.Context) string {
	if c.Size <= 0 {
		return strconv.FormatInt(c.Used, 10)
	}
	return fmt.Sprintf("%d/%d (%.0f%%)", c.Used, c.Size, 100*float64(c.Used)/float64(c.Size))
}

// moneyList prints amounts, one per currency.
func moneyList(list []pool.Money) string {
	if len(list) == 0 {
		return "-"
	}
	parts := make([]string, len(list))
	for i, m := range list {
		parts[i] = moneyText(m.Amount, m.Currency)
	}
	return strings.Join(parts, " + ")
}

// moneyText prints an amount in its currency: in plain digits, or with
// an exponent when it is too large to read that way (an agent's report of
// 1.7e308 would print 309 digits). The currency is the agent's word:
// shown escaped, on one line, and cut short when long.
func moneyText(amount float64, currency string) string {
	format := byte('f')
	if math.Abs(amount) >= 1e15 {
		format = 'g'
	}
	return strconv.FormatFloat(amount, format, -1, 64) + " " + oneLine(currency, maxCurrencyShown)
}

// maxCurrencyShown bounds the characters of a currency shown.
const maxCurrencyShown = 16

// budgetText prints a budget's limits.
func budgetText(b *backends.Budget) string {
	if b == nil || b.IsZero() {
		return "none"
	}
	var parts []string
	if b.Tokens > 0 {
		parts = append(parts, strconv.FormatInt(b.Tokens, 10)+" tokens")
	}
	if b.Cost > 0 {
		parts = append(parts, moneyText(b.Cost, b.Currency))
	}
	return strings.Join(parts, ", ")
}

// otherCurrencyNote says when cost reported in another currency than the
// budget's is not counted against it.
func otherCurrencyNote(b *backends.Budget, cost []pool.Money) string {
	if b == nil || b.Cost <= 0 {
		return ""
	}
	var other []string
	for _, m := range cost {
		if m.Currency != b.Currency {
			other = append(other, moneyText(m.Amount, m.Currency))
		}
	}
	if len(other) == 0 {
		return ""
	}
	return fmt.Sprintf("(%s not counted: the budget is in %s)", strings.Join(other, " + "), b.Currency)
}

// budgetFlags are the flags that set a budget.
type budgetFlags struct {
	tokens   *int64
	cost     *float64
	currency *string
}

// addBudgetFlags adds the budget flags to fs, their names prefixed.
func addBudgetFlags(fs *flag.FlagSet, prefix string) budgetFlags {
	return budgetFlags{
		tokens:   fs.Int64(prefix+"tokens", 0, "the most tokens the session's turns may use (0: no limit)"),
		cost:     fs.Float64(prefix+"cost", 0, "the most the session's agents may cost, in --"+prefix+"currency (0: no limit)"),
		currency: fs.String(prefix+"currency", "USD", "the `CODE` of the cost limit's currency; cost in another is not counted"),
	}
}

func (f budgetFlags) budget() backends.Budget {
	b := backends.Budget{Tokens: *f.tokens, Cost: *f.cost}
	if b.Cost > 0 {
		b.Currency = strings.ToUpper(*f.currency)
	}
	return b
}

// sessionBudget: agentpool session budget SESSION [--tokens N] [--cost X --currency C] [--clear].
func (c *cli) sessionBudget(ctx context.Context, args []string) error {
	fs := c.flagSet("session budget", "session budget SESSION [--tokens N] [--cost X [--currency USD]] [--clear] [--json]\n\nSets the session's own budget (it replaces the one before), or with --clear\nremoves it. A prompt that would start past it is refused, and a running turn\nthat crosses it is cancelled. Without a limit, shows the session's usage.")
	bf := addBudgetFlags(fs, "")
	clear := fs.Bool("clear", false, "remove the session's budget")
	asJSON := fs.Bool("json", false, "print the session's usage as JSON")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	b := bf.budget()
	var su pool.SessionUsage
	switch {
	case *clear && !b.IsZero():
		return fmt.Errorf("session budget: --clear goes without --tokens and --cost")
	case *clear || !b.IsZero():
		su, err = api.SetBudget(ctx, pos[0], httpapi.BudgetRequest(b))
	default:
		su, err = api.SessionUsage(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(su)
	}
	c.renderSessionUsage(c.stdout, su)
	return nil
}

// usageSummary is a usage event (usage_update) in a few words: context
// occupancy and the agent session's cost so far.
func usageSummary(ev backends.Event, l lineData) string {
	var parts []string
	if l.Used != nil && l.Size != nil && *l.Size > 0 {
		parts = append(parts, fmt.Sprintf("context %d of %d tokens (%d%%)", *l.Used, *l.Size, *l.Used*100 / *l.Size))
	}
	var c struct {
		Cost *pool.Money `json:"cost"`
	}
	if json.Unmarshal(ev.Data, &c) == nil && c.Cost != nil {
		parts = append(parts, "cost so far "+moneyText(c.Cost.Amount, c.Cost.Currency))
	}
	if len(parts) == 0 {
		return "usage updated"
	}
	return strings.Join(parts, ", ")
}
