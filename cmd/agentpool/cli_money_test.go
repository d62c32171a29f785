package main

import "testing"

// TestMoneyTextHuge: an amount too large to read in digits is printed
// with an exponent; ordinary amounts as before.
func TestMoneyTextHuge(t *testing.T) {
	for amount, want := range map[float64]string{0.25: "0.25 USD", 1234.5: "1234.5 USD", 1.7e308: "1.7e+308 USD"} {
		if got := moneyText(amount, "USD"); got != want {
			t.Errorf("moneyText(%v) = %q; want %q", amount, got, want)
		}
	}
}
