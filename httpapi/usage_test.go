package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/agentpool/agentpool/pool"
)

func TestBudgetErrorIs402WithFigures(t *testing.T) {
	be := &pool.BudgetError{BudgetExceeded: pool.BudgetExceeded{Scope: pool.BudgetSession, Session: "s1", Kind: pool.BudgetTokens,
		Limit: 1000, Used: 1200, Message: "session budget exceeded: 1200 tokens used of 1000 tokens"}}
	e := errorFor(fmt.Errorf("prompt: %w", be))
	if e.Status != http.StatusPaymentRequired || e.Code != CodeBudgetExceeded || e.Message != be.Message || e.Budget == nil || e.Budget.Used != 1200 {
		t.Errorf("errorFor(BudgetError) = %+v; want 402 budget_exceeded with the figures and the user's sentence", e)
	}
	if e := errorFor(fmt.Errorf("x: %w", pool.ErrNoUsage)); e.Status != http.StatusNotImplemented {
		t.Errorf("errorFor(ErrNoUsage) status = %d; want 501", e.Status)
	}
	if !errors.Is(be, pool.ErrBudgetExceeded) {
		t.Errorf("BudgetError is not ErrBudgetExceeded")
	}
}
