package acp

import (
	"strconv"
	"testing"
)

// Partial updates keep the last kind; past maxToolCalls the oldest id is
// forgotten and memory stays bounded.
func TestToolCallsPartialAndBounded(t *testing.T) {
	var tc toolCalls
	tc.note("a", "execute")
	tc.note("a", "")
	if got := tc.kind("a"); got != "execute" {
		t.Errorf("kind(a) after a kind-less update = %q; want execute", got)
	}
	tc.note("a", "edit")
	if got := tc.kind("a"); got != "edit" {
		t.Errorf("kind(a) after an update to edit = %q; want edit", got)
	}
	for i := range 3 * maxToolCalls {
		tc.note(strconv.Itoa(i), "read")
	}
	if n := tc.len(); n != maxToolCalls {
		t.Errorf("remembered = %d; want %d", n, maxToolCalls)
	}
	if tc.known("a") || tc.kind("0") != "" {
		t.Errorf("oldest ids still remembered")
	}
	if got := tc.kind(strconv.Itoa(3*maxToolCalls - 1)); got != "read" {
		t.Errorf("newest kind = %q; want read", got)
	}
	if c := cap(tc.order); c > 2*maxToolCalls+1 {
		t.Errorf("order capacity = %d; want at most about 2×%d", c, maxToolCalls)
	}
}

// A tool_call id is known within its turn only: the same id in a later
// turn is a new call, while its kind stays available.
func TestToolCallsKnownPerTurn(t *testing.T) {
	var tc toolCalls
	tc.startTurn()
	tc.note("read-1", "read")
	if !tc.known("read-1") {
		t.Fatalf("known(read-1) in its turn = false; want true")
	}
	tc.startTurn()
	if tc.known("read-1") {
		t.Errorf("known(read-1) in the next turn = true; want false")
	}
	if got := tc.kind("read-1"); got != "read" {
		t.Errorf("kind(read-1) in the next turn = %q; want read", got)
	}
	tc.note("read-1", "")
	if !tc.known("read-1") || tc.kind("read-1") != "read" {
		t.Errorf("after a new announcement: known = %v, kind = %q; want true, read", tc.known("read-1"), tc.kind("read-1"))
	}
}
