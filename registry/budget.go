package registry

import (
	"reflect"
	"strconv"

	"github.com/agentpool/agentpool/backends"
)

// budgetFields lists the fields of an entry's "budget" object.
func budgetFields() []string { return []string{"tokens", "cost", "currency"} }

// maxBudgetTokens bounds a token budget (far above any real one).
const maxBudgetTokens = 1 << 50

// budget decodes an entry's "budget": {"tokens": N, "cost": X,
// "currency": "USD"}, the provider's limit over all its sessions. A cost
// needs its currency, an ISO 4217 code; at least one limit is required.
func (c *checker) budget(n *node, path string) *backends.Budget {
	if !c.want(n, kindObject, path) {
		return nil
	}
	var b backends.Budget
	ok := true
	for _, m := range n.members {
		fp := joinPath(path, m.key)
		switch m.key {
		case "tokens":
			v, good := c.integer(m.val, fp)
			if good && (v <= 0 || v > maxBudgetTokens) {
				c.add(m.val.off, fp, "want a positive number of tokens, got %d", v)
				good = false
			}
			ok = ok && good
			b.Tokens = int64(v)
		case "cost":
			if !c.want(m.val, kindNumber, fp) {
				ok = false
				continue
			}
			v, err := strconv.ParseFloat(m.val.num.String(), 64)
			if err != nil || v <= 0 {
				c.add(m.val.off, fp, "want a positive amount, got %s", m.val.num)
				ok = false
				continue
			}
			b.Cost = v
		case "currency":
			s, good := c.str(m.val, fp)
			if good && !isCurrency(s) {
				c.add(m.val.off, fp, "want a currency code of three capital letters, such as \"USD\", got %q", s)
				good = false
			}
			ok = ok && good
			b.Currency = s
		default:
			c.unknown(m, fp, budgetFields())
			ok = false
		}
	}
	switch {
	case !ok:
		return nil
	case b.Cost > 0 && b.Currency == "":
		c.add(n.off, path, "\"cost\" needs its \"currency\", such as \"USD\" (cost in another currency is not counted)")
		return nil
	case b.Cost == 0 && b.Currency != "":
		c.add(n.off, path, "\"currency\" without \"cost\"")
		return nil
	case b.IsZero():
		c.add(n.off, path, "want \"tokens\" and/or \"cost\" (remove \"budget\" for no limit)")
		return nil
	}
	return &b
}

// isCurrency reports whether s looks like an ISO 4217 code.
func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

// sameLaunch reports whether two specs launch the same agent: they are
// equal but for their budgets and handoff settings, which change no launch (nor a probe), and
// their AuthEnv, which comes from the agent's last probe, not from the
// config (a probe made with it is a probe of the provider's spec).
func sameLaunch(a, b backends.Spec) bool {
	a.Budget, b.Budget = backends.Budget{}, backends.Budget{}
	a.AuthEnv, b.AuthEnv = nil, nil
	a.Handoff, b.Handoff, a.HandoffBytes, b.HandoffBytes = "", "", 0, 0 // briefings, not the launch
	return reflect.DeepEqual(a, b)
}
