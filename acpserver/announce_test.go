package acpserver

import "testing"

// TestAnnouncerCoalesces: the first ask starts the goroutine; asks made
// while it runs start none and make one more run, a full one when any
// of them was (it sends the options too); the goroutine ends once none
// is left, and the next ask starts another.
func TestAnnouncerCoalesces(t *testing.T) {
	var a announcer
	if !a.ask(false) {
		t.Fatal("the first ask started no goroutine")
	}
	if all, ok := a.next(); !ok || all {
		t.Fatalf("next = %v, %v; want the options", all, ok)
	}
	for i := 0; i < 100; i++ {
		if a.ask(i == 50) {
			t.Fatal("an ask made while the goroutine runs started another")
		}
	}
	if all, ok := a.next(); !ok || !all {
		t.Fatalf("next after 100 asks = %v, %v; want one full announcement", all, ok)
	}
	if _, ok := a.next(); ok {
		t.Fatal("a second announcement for asks already served")
	}
	if !a.ask(false) {
		t.Fatal("an ask after the goroutine ended started none")
	}
}
