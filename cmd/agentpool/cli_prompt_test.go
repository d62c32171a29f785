package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/google/go-cmp/cmp"
)

func TestPromptNonInteractive(t *testing.T) {
	e := newCLIEnv(t)
	answered := make(chan error, 1)
	go func() {
		// Approve through the API, as a person with another terminal would.
		req := <-e.pending
		answered <- e.api.Answer(t.Context(), "s1", req, "allow_once")
	}()
	out, errOut, err := e.run(t, t.Context(), false, false, "", "prompt", "s1", "write", "--agent", "demo", "the file")
	if err != nil {
		t.Fatalf("prompt error = %v; stderr %s", err, errOut)
	}
	if err := <-answered; err != nil {
		t.Fatalf("Answer() error = %v", err)
	}
	if r := <-e.prompts; r.Text != "write the file" || r.Agent != "demo" {
		t.Errorf("StartPrompt got %+v; want text %q and agent demo", r, "write the file")
	}
	want := `(thinking) Looking at the repository first.
→ Read README.md [read]
  ✓ Read README.md
I read README.md.
? permission asked: Write AGENTPOOL_DEMO.md (risk: medium)
  waiting for an answer: agentpool permissions answer s1 r1 allow_once|allow_always|reject_once
  permission allow (user)
  ✓ Write AGENTPOOL_DEMO.md
Done.
— turn 3 ended: end_turn after 1.2s; 1 file changed (+5 −0)
see the changes: agentpool diff s1 --turn 3
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("prompt stdout mismatch (-want +got):\n%s", diff)
	}
	if wantErr := "starting agent demo…\nagent demo ready (pid 4242)\n"; errOut != wantErr {
		t.Errorf("prompt stderr = %q; want %q", errOut, wantErr)
	}
}

func TestPromptInteractive(t *testing.T) {
	for _, tc := range []struct {
		name, stdin, choice string
		fails               bool
	}{
		{"yes", "y\n", "allow_once", false},
		{"always after a wrong answer", "maybe\nalways\n", "allow_always", false},
		{"no", "n\n", "reject_once", true},
		{"empty means no", "\n", "reject_once", true},
		{"end of input means no", "", "reject_once", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCLIEnv(t)
			var got []string
			e.fp.AnswerFunc = func(session, request, choice string) error {
				got = append(got, choice)
				e.answers <- choice
				return nil
			}
			out, _, err := e.run(t, t.Context(), true, false, tc.stdin, "prompt", "s1", "write the file")
			if (err != nil) != tc.fails {
				t.Fatalf("prompt with answer %q error = %v; want failure %v", tc.stdin, err, tc.fails)
			}
			if tc.fails && !strings.Contains(err.Error(), "turn 3 ended: refusal") {
				t.Errorf("prompt error = %v; want it to say the turn ended in refusal", err)
			}
			if !cmp.Equal(got, []string{tc.choice}) {
				t.Errorf("answers = %q; want [%q]", got, tc.choice)
			}
			q := "  Allow once [y] · Always allow in this session [a] · Reject [N]: "
			if wantQ := strings.Count(tc.stdin, "\n"); wantQ > 0 && strings.Count(out, q) != wantQ {
				t.Errorf("prompt stdout = %q; want the question %q asked %d times", out, q, wantQ)
			}
			<-e.pending
		})
	}
}

// TestPermissionQuestionSpoofedNames: an agent that names its
// "allow always" option "Reject this change" gets the daemon's labels in
// the question, its own names only as its words, and an empty answer (a
// stray Enter) rejects.
func TestPermissionQuestionSpoofedNames(t *testing.T) {
	e := newCLIEnv(t)
	var got []string
	e.fp.AnswerFunc = func(session, request, choice string) error {
		got = append(got, choice)
		return nil
	}
	var d eventData
	if err := json.Unmarshal([]byte(`{"request":"r9","options":[
		{"id":"a","name":"Reject this change","kind":"allow_always"},
		{"id":"b","name":"Allow","kind":"reject_once"}]}`), &d); err != nil {
		t.Fatal(err)
	}
	// "y" asks again: the agent offers no "allow once".
	for _, tc := range []struct{ stdin, want string }{{"\n", "reject_once"}, {"a\n", "allow_always"}, {"y\nn\n", "reject_once"}} {
		got = nil
		var out bytes.Buffer
		c := &cli{env: ClientEnv{Home: e.home}, stdin: strings.NewReader(tc.stdin), stdout: &out, stderr: &out, inTTY: true}
		c.askPermission(t.Context(), e.api, "s1", d, newRenderer(&out, &out, false), &out)
		if !cmp.Equal(got, []string{tc.want}) {
			t.Errorf("answer %q sent %q; want [%q]", tc.stdin, got, tc.want)
		}
		text := out.String()
		for _, want := range []string{
			`the agent calls "Reject this change": Always allow in this session`,
			`the agent calls "Allow": Reject`,
			"Always allow in this session [a] · Reject [N]: ",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("question = %q; want it to contain %q", text, want)
			}
		}
		if strings.Contains(text, "[y]") {
			t.Errorf("question = %q offers allow once, which the agent did not offer", text)
		}
	}
}

func TestPromptColours(t *testing.T) {
	e := newCLIEnv(t)
	go func() { <-e.pending; _ = e.api.Answer(t.Context(), "s1", "r1", "allow_once") }()
	out, _, err := e.run(t, t.Context(), false, true, "", "prompt", "s1", "go")
	if err != nil {
		t.Fatalf("prompt error = %v", err)
	}
	for _, want := range []string{
		ansiDim + "Looking at the repository first." + ansiReset + "\n",
		ansiCyan + "→ Read README.md [read]" + ansiReset + "\n",
		ansiGreen + "— turn 3 ended: end_turn",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("prompt on a terminal = %q; want it to contain %q", out, want)
		}
	}
}

func TestPromptTextFromStdin(t *testing.T) {
	e := newCLIEnv(t)
	go func() { <-e.pending; _ = e.api.Answer(t.Context(), "s1", "r1", "allow_once") }()
	if _, _, err := e.run(t, t.Context(), false, false, "text\nfrom stdin\n", "prompt", "s1"); err != nil {
		t.Fatalf("prompt error = %v", err)
	}
	if r := <-e.prompts; r.Text != "text\nfrom stdin\n" || r.Agent != "" {
		t.Errorf("StartPrompt got %+v; want the text of stdin and no agent", r)
	}
}

func TestPromptInterruptCancelsTurn(t *testing.T) {
	e := newCLIEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-e.pending
		for e.log.Subscribers() == 0 { // the command follows the turn
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, errOut, err := e.run(t, ctx, false, false, "", "prompt", "s1", "go")
	if err == nil || !strings.Contains(err.Error(), "turn 3 cancelled") {
		t.Errorf("interrupted prompt error = %v; want turn 3 cancelled", err)
	}
	if id := <-e.cancels; id != "s1" {
		t.Errorf("Cancel(%q); want s1", id)
	}
	if !strings.Contains(errOut, "interrupted: cancelling turn 3… done") {
		t.Errorf("stderr = %q; want the cancellation reported", errOut)
	}
}

func TestPromptErrors(t *testing.T) {
	e := newCLIEnv(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no session", []string{"prompt"}, "wrong number of arguments"},
		{"no text on a terminal", []string{"prompt", "s1"}, "no text"},
		{"unknown session", []string{"prompt", "nope", "hi"}, "not_found"},
		{"unknown flag", []string{"prompt", "s1", "--colour", "hi"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := e.run(t, t.Context(), true, false, "", tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q error = %v; want %q", tc.args, err, tc.want)
			}
		})
	}
}

func TestPromptJSON(t *testing.T) {
	e := newCLIEnv(t)
	go func() { <-e.pending; _ = e.api.Answer(t.Context(), "s1", "r1", "allow_once") }()
	out, errOut, err := e.run(t, t.Context(), false, false, "", "prompt", "--json", "s1", "go")
	if err != nil {
		t.Fatalf("prompt --json error = %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		var ev backends.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Session != "s1" || (ev.Turn != 3 && ev.Turn != 0) {
			t.Errorf("prompt --json line %q: %v; want an event of turn 3 (or of its agent)", l, err)
		}
	}
	if len(lines) != 14 || !strings.Contains(lines[len(lines)-1], `"type":"turn.ended"`) {
		t.Errorf("prompt --json printed %d lines, the last %q; want 14 (all but the older turn's), ending with turn.ended", len(lines), lines[len(lines)-1])
	}
	if !strings.Contains(errOut, "waiting for an answer") {
		t.Errorf("prompt --json stderr = %q; want the permission hint there", errOut)
	}
}
