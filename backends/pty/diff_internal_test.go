package pty

import (
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestTurnText(t *testing.T) {
	tests := []struct {
		name          string
		before, after string
		prompt        string
		skip          []int
		ignore        []string
		want          string
	}{
		{
			name:   "shell: echo and new prompt left out",
			before: "$ ls\nfile\n$ ",
			after:  "$ ls\nfile\n$ echo hi\nhi\n$ ",
			prompt: "echo hi", skip: []int{4},
			want: "hi",
		},
		{
			name:   "scrolled: rows that moved up still match",
			before: "a\nb\nc\n$ ",
			after:  "c\n$ say\nx\ny\n$ ",
			prompt: "say", skip: []int{4},
			want: "x\ny",
		},
		{
			name:   "tui: answer above an unchanged input box",
			before: "header\n\n╭────╮\n│ >  │\n╰────╯\n? for shortcuts",
			after:  "header\n> fix it\n\nI fixed it.\n  Edited a.go\n╭────╮\n│ >  │\n╰────╯\n? for shortcuts",
			prompt: "fix it",
			want:   "I fixed it.\n  Edited a.go",
		},
		{
			name:   "wrapped echo of a long prompt",
			before: "> ",
			after:  "> please refactor the parser\n and add tests\nDone.\n> ",
			prompt: "please refactor the parser and add tests", skip: []int{3},
			want: "Done.",
		},
		{
			name:   "an answer that repeats the prompt is kept",
			before: "> ",
			after:  "> hello\nhello\n> ",
			prompt: "hello", skip: []int{2},
			want: "hello",
		},
		{
			name:   "no echo, nothing dropped from the answer",
			before: "> ",
			after:  "> \nthe answer\n> ",
			prompt: "question", skip: []int{2},
			want: "the answer",
		},
		{
			name:   "echo below other new rows, chrome ignored",
			before: "──────\n❯\u00a0\n──────\n  ⏵⏵ auto mode on (shift+tab to cycle)",
			after: " ▐▛███▜▌   Claude Code v2.1.330\n\n❯ list the files\n\n● Two files: a.go and b.go.\n\n✻ Worked for 2s\n" +
				"──────\n❯\u00a0\n──────\n  ⏵⏵ auto mode on (shift+tab to cycle)",
			prompt: "list the files", skip: []int{8},
			ignore: []string{`^ ?[▐▝▘▗▖▛▜▙▟█▀▄▌]`, `^\s*⏵⏵`, `^\s*─{3,}\s*$`, `^✻ \S+ for \d`},
			want:   "● Two files: a.go and b.go.",
		},
		{
			name:   "wrapped echo below a status row",
			before: "> ",
			after:  "Tokens: 10 sent\n> please refactor the parser\n and add tests\nDone.\n> ",
			prompt: "please refactor the parser and add tests", skip: []int{4},
			want: "Tokens: 10 sent\nDone.",
		},
		{
			name:   "a later row quoting the prompt is not its echo",
			before: "> ",
			after:  "Answer:\nyou said hello world\n> ",
			prompt: "hello world", skip: []int{2},
			want: "Answer:\nyou said hello world",
		},
		{
			name:   "nothing new",
			before: "> ",
			after:  "> ",
			prompt: "x", skip: []int{0},
			want: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			skip := map[int]bool{}
			for _, i := range tt.skip {
				skip[i] = true
			}
			var ignore []*regexp.Regexp
			for _, expr := range tt.ignore {
				ignore = append(ignore, regexp.MustCompile(expr))
			}
			got := turnText(strings.Split(tt.before, "\n"), strings.Split(tt.after, "\n"), tt.prompt, skip, ignore)
			if got != tt.want {
				t.Errorf("turnText(%q, %q, %q) = %q; want %q", tt.before, tt.after, tt.prompt, got, tt.want)
			}
		})
	}
}

func TestReadyRows(t *testing.T) {
	rows := []string{"out", "> ", "status", "> "}
	re := regexp.MustCompile(`(?m)^> $`)
	got := readyRows(re, rows, Cursor{X: 0, Y: 2, Visible: false})
	if len(got) != 1 || !got[3] {
		t.Errorf("readyRows(last match only, hidden cursor) = %v; want {3}", got)
	}
	got = readyRows(regexp.MustCompile(`(?m)^status\n> $`), rows, Cursor{X: 2, Y: 0, Visible: true})
	if len(got) != 3 || !got[0] || !got[2] || !got[3] {
		t.Errorf("readyRows(two-row match, cursor on row 0) = %v; want {0, 2, 3}", got)
	}
}

func TestPasteBytes(t *testing.T) {
	tests := []struct {
		text      string
		bracketed bool
		want      string
	}{
		{"hello", true, "\x1b[200~hello\x1b[201~"},
		{"hello", false, "hello"},
		{"two\nlines\r\nthree", true, "\x1b[200~two\rlines\rthree\x1b[201~"},
		{"no \x1b[201~escape\x03 or ^C\x7f", true, "\x1b[200~no [201~escape or ^C\x1b[201~"},
		{"tab\tand ünïcode \u0085", false, "tab\tand ünïcode "},
	}
	for _, tt := range tests {
		if got := string(pasteBytes(tt.text, tt.bracketed)); got != tt.want {
			t.Errorf("pasteBytes(%q, %v) = %q; want %q", tt.text, tt.bracketed, got, tt.want)
		}
	}
}

func TestWatchQuietWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const quiet = time.Second
		start := time.Now()
		w := newWatch(watchSpec{quiet: quiet})
		defer w.stop()
		// Output every 600ms keeps it from firing; then silence.
		for range 3 {
			time.Sleep(600 * time.Millisecond)
			if w.output(nil) {
				t.Fatalf("watch fired at %v with output flowing", time.Since(start))
			}
		}
		<-w.Ready()
		if got, want := time.Since(start), 1800*time.Millisecond+quiet; got != want {
			t.Errorf("quiet watch fired after %v; want exactly %v (the window after the last output)", got, want)
		}
	})
}

func TestWatchPattern(t *testing.T) {
	ready := regexp.MustCompile(`(?m)^> $`)
	busy := regexp.MustCompile(`esc to interrupt`)
	type step struct {
		screen string // "" checks the screen "> " without output
		fired  bool
	}
	tests := []struct {
		name  string
		spec  watchSpec
		steps []step
	}{
		{"start: not before the prompt", watchSpec{ready: ready}, []step{{"banner", false}, {"banner\n> ", true}}},
		{"start: a ready screen at once", watchSpec{ready: ready}, []step{{"", true}}},
		{"turn: not on the stale prompt, not on the echo", watchSpec{ready: ready, needOutput: true}, []step{
			{"", false}, {"> hello", false}, {"> hello\nanswer\n> ", true},
		}},
		{"busy screen is never ready", watchSpec{ready: ready, busy: busy, needOutput: true}, []step{
			{"> \n* esc to interrupt", false}, {"> \n", true},
		}},
		{"needBusy: ready at once after busy was seen", watchSpec{ready: ready, busy: busy, needOutput: true, needBusy: true, quiet: time.Hour}, []step{
			{"> \n", false}, {"> \n* esc to interrupt", false}, {"answer\n> \n", true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWatch(tt.spec)
			defer w.stop()
			for i, s := range tt.steps {
				var got bool
				if s.screen == "" {
					got = w.check([]byte("> "))
				} else {
					got = w.output(func() []byte { return []byte(s.screen) })
				}
				if got != s.fired {
					t.Fatalf("step %d (%q): fired = %v; want %v", i, s.screen, got, s.fired)
				}
			}
			select {
			case <-w.Ready():
			default:
				t.Error("Ready() not closed after the watch fired")
			}
		})
	}
}

// TestWatchNeedBusyFallback: a program that answers before its busy
// indicator was ever seen ends the turn once its ready screen has stayed
// quiet for the window; output that keeps it ready restarts the window.
func TestWatchNeedBusyFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ready := regexp.MustCompile(`(?m)^> $`)
		busy := regexp.MustCompile(`esc to interrupt`)
		w := newWatch(watchSpec{ready: ready, busy: busy, quiet: time.Second, needOutput: true, needBusy: true})
		defer w.stop()
		start := time.Now()
		w.output(func() []byte { return []byte("> ") })
		time.Sleep(700 * time.Millisecond)
		w.output(func() []byte { return []byte("answer\n> ") })
		<-w.Ready()
		if got, want := time.Since(start), 1700*time.Millisecond; got != want {
			t.Errorf("fallback fired after %v; want %v", got, want)
		}
	})
}
