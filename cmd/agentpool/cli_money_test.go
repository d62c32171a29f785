package main

import (
	"strings"
	"testing"
)

// TestMoneyTextHuge: an amount too large to read in digits is printed
// with an exponent; ordinary amounts as before.
func TestMoneyTextHuge(t *testing.T) {
	for amount, want := range map[float64]string{0.25: "0.25 USD", 1234.5: "1234.5 USD", 1.7e308: "1.7e+308 USD"} {
		if got := moneyText(amount, "USD"); got != want {
			t.Errorf("moneyText(%v) = %q; want %q", amount, got, want)
		}
	}
}

// TestMoneyTextCurrencyEscaped: the currency is the agent's word, shown
// escaped, on one line, and cut short when long.
func TestMoneyTextCurrencyEscaped(t *testing.T) {
	if got, want := moneyText(1, "U\x1b]0;t\x07\nSD"), "1 U^[]0;t^G SD"; got != want {
		t.Errorf("moneyText with an escape in the currency = %q; want %q", got, want)
	}
	if got := moneyText(1, strings.Repeat("X", 1000)); len(got) > 2+maxCurrencyShown*3 {
		t.Errorf("moneyText with a 1000-character currency = %q; want it cut short", got)
	}
}
