package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// reviewFile is a.go as the repository has it: 20 numbered lines.
func reviewFile(change map[int]string) string {
	var b strings.Builder
	for i := 1; i <= 20; i++ {
		line := fmt.Sprintf("line %d", i)
		if c, ok := change[i]; ok {
			line = c
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// writeReviewAgent writes home's providers.json with one ACP provider,
// "rev", playing script with file writes allowed.
func writeReviewAgent(t *testing.T, home, bin string, script agenttest.Script) {
	t.Helper()
	js, err := json.Marshal(script)
	if err != nil {
		t.Fatal(err)
	}
	provs := map[string]any{"rev": map[string]any{"extends": "acp", "label": "rev", "command": []string{bin, "demo-agent"},
		"env":         map[string]string{"AGENTPOOL_DEMO_SCRIPT": string(js)},
		"permissions": map[string]string{"edit": "allow", "fs.write": "allow"}}}
	b, err := json.Marshal(map[string]any{"version": 1, "providers": provs})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, providersFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// reviewScript is an agent whose first turn changes lines 5 and 15 of a.go
// and whose second (the answer to a review) changes line 5 again and says
// it handled a.go:12.
func reviewScript() agenttest.Script {
	return agenttest.Script{Turns: []agenttest.Turn{
		{Steps: []agenttest.Step{
			{Write: &agenttest.FileOp{Path: "a.go", Content: reviewFile(map[int]string{5: "line 5 by the agent", 15: "line 15 by the agent"})}},
			{Chunk: "changed lines 5 and 15"},
		}},
		{Steps: []agenttest.Step{
			{Write: &agenttest.FileOp{Path: "a.go", Content: reviewFile(map[int]string{5: "line 5 fixed after review", 15: "line 15 by the agent"})}},
			{Chunk: "Fixed line 5; a.go:12 is fine as it is."},
		}},
	}}
}

// TestEndToEndReview sends a review of a session's diff through the real
// daemon: invalid comments are refused naming the field, the prompt
// quotes each file and line with its context, and once the answering turn
// has ended each comment says whether (and how) it was addressed, in the
// turn API and in session show.
func TestEndToEndReview(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeReviewAgent(t, home, bin, reviewScript())
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"a.go": reviewFile(nil), "other.txt": "x\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	sess, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "rev", Title: "number lines"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, sess.ID, "", "change some lines", true); err != nil {
		t.Fatal(err)
	}

	bad := []struct {
		c     []pool.ReviewComment
		field string
	}{
		{[]pool.ReviewComment{{Path: "a.go", Line: 5, Text: "ok"}, {Path: "a.go", Line: 21, Text: "past the end"}}, "comments[1].line"},
		{[]pool.ReviewComment{{Path: "other.txt", Line: 1, Text: "not in the diff"}}, "comments[0].path"},
		{[]pool.ReviewComment{{Path: "a.go", Line: 5, Text: "  "}}, "comments[0].text"},
		{[]pool.ReviewComment{{Path: "a.go", Line: 0, Text: "x"}}, "comments[0].line"},
		{[]pool.ReviewComment{{Path: "a.go", Line: 10, Side: "old", Text: "not a removed line shown"}}, "comments[0].line"},
		{[]pool.ReviewComment{{Path: "a.go", Line: 5, Side: "left", Text: "x"}}, "comments[0].side"},
		{nil, "comments"},
	}
	for _, b := range bad {
		_, err := d.client.Review(ctx, sess.ID, httpapi.ReviewRequest{Comments: b.c}, false)
		var ae *httpapi.Error
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != b.field || !strings.Contains(ae.Message, b.field) {
			t.Errorf("Review(%+v) error = %v; want 400 naming %s", b.c, err, b.field)
		}
	}

	turn, err := d.client.Review(ctx, sess.ID, httpapi.ReviewRequest{Summary: "Two things.", Comments: []pool.ReviewComment{
		{Path: "a.go", Line: 5, Text: "say why line 5 changed"},
		{Path: "a.go", Line: 15, Text: "line 15 needs a test"},
		{Path: "a.go", Line: 12, Text: "is line 12 right?"},
		{Path: "a.go", Line: 15, Side: "old", Text: "why remove the old line 15?"},
	}}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Two things.", "a.go:5\n", "> 5 | line 5 by the agent", "  4 | line 4", "  7 | line 7", "say why line 5 changed", "a.go:15\n", "line 15 needs a test",
		"a.go:15 (a line your changes removed; numbered as in the base)", "> 15 (removed) | line 15"} {
		if !strings.Contains(turn.Prompt, want) {
			t.Errorf("review prompt lacks %q:\n%s", want, turn.Prompt)
		}
	}
	if turn.Review == nil || !turn.Review.Judged || len(turn.Review.Comments) != 4 {
		t.Fatalf("turn %d review = %+v; want 4 judged comments", turn.ID, turn.Review)
	}
	want := []struct {
		addressed bool
		by        string
	}{{true, "diff"}, {false, ""}, {true, "reply"}, {true, "diff"}}
	for i, c := range turn.Review.Comments {
		if c.Addressed == nil || *c.Addressed != want[i].addressed || c.AddressedBy != want[i].by {
			t.Errorf("comment %d (%s:%d) addressed = %v by %q; want %v by %q", i, c.Path, c.Line, c.Addressed, c.AddressedBy, want[i].addressed, want[i].by)
		}
	}
	// The turn API lists them too, and so does session show.
	again, err := d.client.Turn(ctx, sess.ID, turn.ID, false)
	if err != nil || again.Review == nil || len(again.Review.Comments) != 4 || again.Review.Comments[1].Addressed == nil {
		t.Errorf("GET turn %d = %+v, %v; want its judged review", turn.ID, again.Review, err)
	}
	out, err := d.cli("session", "show", sess.ID)
	if err != nil {
		t.Fatalf("session show: %v\n%s", err, out)
	}
	for _, w := range []string{"review answered by turn 2:", "a.go:5", "addressed (diff)", "a.go:15", "not addressed", "addressed (reply)"} {
		if !strings.Contains(out, w) {
			t.Errorf("session show lacks %q:\n%s", w, out)
		}
	}
}
