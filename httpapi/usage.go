package httpapi

import (
	"context"
	"net/http"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// Usager is what the usage endpoints need of the pool; *pool.Pool
// satisfies it.
type Usager interface {
	Usage(ctx context.Context) (pool.UsageReport, error)
	SessionUsage(ctx context.Context, session string) (pool.SessionUsage, error)
	SetBudget(ctx context.Context, session string, b backends.Budget) error
}

var _ Usager = (*pool.Pool)(nil)

// BudgetRequest is the body of PUT /v1/sessions/{id}/budget: the
// session's own budget; zero (or absent) fields set no limit, and an empty
// object removes the budget.
type BudgetRequest = backends.Budget

// usager returns the pool as a Usager, or the error to answer with.
func (s *Server) usager() (Usager, error) {
	u, ok := s.pool.(Usager)
	if !ok {
		return nil, &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon keeps no usage"}
	}
	return u, nil
}

// usage: GET /v1/usage → 200 with the pool.UsageReport: tokens and cost
// per provider (with its budget) and per session.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) error {
	u, err := s.usager()
	if err != nil {
		return err
	}
	rep, err := u.Usage(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// sessionUsage: GET /v1/sessions/{id}/usage → 200 with the
// pool.SessionUsage.
func (s *Server) sessionUsage(w http.ResponseWriter, r *http.Request) error {
	u, err := s.usager()
	if err != nil {
		return err
	}
	su, err := u.SessionUsage(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, su)
	return nil
}

// putBudget: PUT /v1/sessions/{id}/budget {tokens?, cost?, currency?} →
// 200 with the session's pool.SessionUsage, its new budget included.
func (s *Server) putBudget(w http.ResponseWriter, r *http.Request) error {
	u, err := s.usager()
	if err != nil {
		return err
	}
	var b BudgetRequest
	if err := decodeJSON(r, &b, true); err != nil {
		return err
	}
	switch {
	case b.Tokens < 0:
		return badRequest("tokens", "field \"tokens\" must not be negative")
	case b.Cost < 0:
		return badRequest("cost", "field \"cost\" must not be negative")
	case b.Cost > 0 && b.Currency == "":
		return badRequest("currency", "field \"currency\" is required with \"cost\": an ISO 4217 code such as \"USD\"")
	}
	id := r.PathValue("id")
	if err := u.SetBudget(r.Context(), id, b); err != nil {
		return err
	}
	su, err := u.SessionUsage(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, su)
	return nil
}

// Usage returns the usage of every provider and every session.
func (c *Client) Usage(ctx context.Context) (pool.UsageReport, error) {
	var rep pool.UsageReport
	return rep, c.call(ctx, http.MethodGet, "/v1/usage", nil, &rep)
}

// SessionUsage returns what a session used, with its budget.
func (c *Client) SessionUsage(ctx context.Context, id string) (pool.SessionUsage, error) {
	var su pool.SessionUsage
	return su, c.call(ctx, http.MethodGet, sessionPath(id, "usage"), nil, &su)
}

// SetBudget sets (an empty Budget: removes) a session's own budget and
// returns the session's usage with it.
func (c *Client) SetBudget(ctx context.Context, id string, b BudgetRequest) (pool.SessionUsage, error) {
	var su pool.SessionUsage
	return su, c.call(ctx, http.MethodPut, sessionPath(id, "budget"), b, &su)
}

// collectUsage adds what agents used, by provider (never by session: the
// label set stays as small as the provider list): tokens by kind, turns
// with a token count, cost by currency, and the fullest context window.
func (s *Server) collectUsage(ctx context.Context, e *exposition) {
	u, ok := s.pool.(Usager)
	if !ok {
		return
	}
	rep, err := u.Usage(ctx)
	if err != nil {
		s.log.Debug("usage metrics", logKeyErr, err)
		return
	}
	const ns = metricsNamespace
	var tokens, turns, cost, fullest []series
	for _, p := range rep.Providers {
		prov := label{"provider", p.Provider}
		for _, k := range []struct {
			kind string
			n    int64
		}{{"input", p.Tokens.Input}, {"output", p.Tokens.Output}, {"cached_read", p.Tokens.CachedRead},
			{"cached_write", p.Tokens.CachedWrite}, {"thought", p.Tokens.Thought}, {"total", p.Tokens.Total}} {
			tokens = append(tokens, series{labels: []label{prov, {"kind", k.kind}}, value: float64(k.n)})
		}
		turns = append(turns, series{labels: []label{prov}, value: float64(p.Turns)})
		for _, m := range p.Cost {
			cost = append(cost, series{labels: []label{prov, {"currency", m.Currency}}, value: m.Amount})
		}
	}
	most := map[string]float64{}
	for _, sess := range rep.Sessions {
		for _, a := range sess.Agents {
			if a.Context != nil && a.Context.Size > 0 {
				most[a.Agent] = max(most[a.Agent], float64(a.Context.Used)/float64(a.Context.Size))
			}
		}
	}
	for prov, ratio := range most {
		fullest = append(fullest, series{labels: []label{{"provider", prov}}, value: ratio})
	}
	e.add(ns+"usage_tokens_total", "Tokens agents reported for their turns, by provider and kind.", typeCounter, tokens...)
	e.add(ns+"usage_turns_total", "Turns whose agent reported tokens, by provider.", typeCounter, turns...)
	e.add(ns+"usage_cost", "Cost agents reported (the latest cumulative cost of each agent session, summed), by provider and currency.", typeGauge, cost...)
	e.add(ns+"usage_context_ratio_max", "The fullest context window among a provider's agents (used / size, as last reported).", typeGauge, fullest...)
}
