package pool

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentpool/agentpool/backends"
)

// EventTurnBriefing is published before a turn's prompt goes to its agent
// when the prompt carries a briefing: the pool's summary of what the
// agent missed in the session. Its data is a BriefingData.
const EventTurnBriefing = "turn.briefing"

// Briefing bounds.
const (
	// DefaultBriefingBytes bounds a briefing's text when neither the
	// provider nor the session says otherwise.
	DefaultBriefingBytes = backends.DefaultBriefingBytes
	// MinBriefingBytes is the least bound a provider or a session may set.
	MinBriefingBytes = backends.MinBriefingBytes
	// MaxBriefingBytes is the greatest.
	MaxBriefingBytes = backends.MaxBriefingBytes
	// maxAnswerBytes bounds the final answer a turn.ended keeps.
	maxAnswerBytes = 4 << 10
	// maxTurnFiles bounds the files a turn.ended lists.
	maxTurnFiles = 50
	// maxBriefPrompt and maxBriefAnswer bound one turn's prompt and answer
	// in a briefing.
	maxBriefPrompt = 2 << 10
	maxBriefAnswer = 2 << 10
	// maxBriefFiles bounds the files a briefing lists for one turn and
	// for the worktree.
	maxBriefFiles = 30
)

// BriefingData is the data of a turn.briefing event.
type BriefingData struct {
	// Turn is the turn whose prompt carries the briefing; Agent its agent.
	Turn  int64  `json:"turn"`
	Agent string `json:"agent"`
	// Kind is "full" (the agent's conversation holds nothing of the
	// session: a new agent, or one whose context was lost) or "since"
	// (it holds everything up to turn Since, its own last turn).
	Kind  string `json:"kind"`
	Since int64  `json:"since,omitempty"`
	// Turns are the turns the briefing tells of, oldest first; Cut those
	// it left out to stay within Limit bytes (the oldest), CutBytes about
	// how much they would have taken.
	Turns    []int64 `json:"turns"`
	Cut      []int64 `json:"cut,omitempty"`
	CutBytes int     `json:"cut_bytes,omitempty"`
	// Bytes is the size of Text; Limit its bound.
	Bytes int `json:"bytes"`
	Limit int `json:"limit"`
	// Delivery is how the agent got it: "resource" (an ACP embedded
	// resource), "text" (a text block ahead of the user's words) or
	// "typed" (typed ahead of them into a terminal program).
	Delivery string `json:"delivery"`
	// URI names the briefing (the resource's uri).
	URI string `json:"uri"`
	// Text is the briefing, Markdown.
	Text string `json:"text"`
}

// briefTurn is one turn as a briefing tells it.
type briefTurn struct {
	ID     int64
	Agent  string
	Prompt string
	// Ended is false for a turn with no turn.ended (it never ended, or
	// its end was lost).
	Ended      bool
	StopReason string
	Error      string
	Stat       *DiffStat
	Files      []TurnFile
	Answer     string
}

// TurnFile is a file a turn changed, as its turn.ended lists it.
type TurnFile struct {
	Path      string `json:"path"`
	Status    string `json:"status,omitempty"`
	Additions int    `json:"additions"`
	Deletions int    `json:"deletions"`
}

// openComment is a review comment not found addressed.
type openComment struct {
	Turn int64
	ReviewComment
}

// briefInput is everything a briefing is made of.
type briefInput struct {
	Session string
	Agent   string
	// Turn is the turn the briefing goes with.
	Turn int64
	// Since is 0 for a full briefing, else the agent's own last turn that
	// its conversation holds.
	Since int64
	// Turns are the turns to tell of, oldest first.
	Turns []briefTurn
	// Live is the worktree's diff against the session's base (nil: not
	// known).
	Live     *Diff
	Comments []openComment
	Limit    int
}

// buildBriefing writes the briefing of in, newest first, within in.Limit
// bytes: the fixed parts (how the last turn ended, the open review
// comments, the worktree's changes) are bounded each, and the turns take
// the room that is left, newest first; those left out are named at the
// end. It needs no agent and no I/O.
func buildBriefing(in briefInput) BriefingData {
	limit := in.Limit
	if limit <= 0 {
		limit = DefaultBriefingBytes
	}
	d := BriefingData{Turn: in.Turn, Agent: in.Agent, Kind: "full", Since: in.Since, Limit: limit, Turns: []int64{}}
	if in.Since > 0 {
		d.Kind = "since"
	}
	var b strings.Builder
	b.Grow(min(limit, 64<<10))
	b.WriteString("# Briefing from agentpool\n\n")
	b.WriteString("_This is agentpool's summary of the session's record, not the user's words. ")
	if d.Kind == "full" {
		fmt.Fprintf(&b, "You (%s) are taking up session %s, in which other agents (or an earlier conversation of yours) have worked: here is what happened, newest first. ", in.Agent, in.Session)
	} else {
		fmt.Fprintf(&b, "You (%s) last spoke in session %s at turn %d; here is what happened since, newest first. ", in.Agent, in.Session, in.Since)
	}
	b.WriteString("The worktree is as they left it. The user's message follows this briefing._\n\n")

	if n := len(in.Turns); n > 0 {
		last := in.Turns[n-1]
		b.WriteString("## How the last turn ended\n\n")
		fmt.Fprintf(&b, "Turn %d (%s): %s.\n\n", last.ID, last.Agent, endOf(last))
	}

	if len(in.Comments) > 0 {
		var r strings.Builder
		fmt.Fprintf(&r, "## Open review comments (%d)\n\n", len(in.Comments))
		for _, c := range in.Comments {
			side := ""
			if c.Side == SideOld {
				side = " (removed line)"
			}
			fmt.Fprintf(&r, "- `%s:%d`%s, review of turn %d: %s\n", c.Path, c.Line, side, c.Turn, oneLine(c.Text, 400))
		}
		r.WriteString("\n")
		b.WriteString(cutText(r.String(), limit/8))
	}

	if in.Live != nil && len(in.Live.Files) > 0 {
		var w strings.Builder
		st := in.Live.Stat
		fmt.Fprintf(&w, "## Current changes in the worktree (against the session's base): %s, +%d −%d\n\n", files(st.Files), st.Additions, st.Deletions)
		writeFiles(&w, fileList(in.Live.Files))
		if in.Live.Patch != "" {
			patch := in.Live.Patch
			room := limit / 4
			note := ""
			if len(patch) > room || in.Live.Truncated {
				patch = cutBytes(patch, room)
				note = fmt.Sprintf("\n_(diff cut at %d of %d bytes)_\n", len(patch), len(in.Live.Patch))
				if in.Live.Truncated {
					note = fmt.Sprintf("\n_(diff cut at %d bytes)_\n", len(patch))
				}
			}
			w.WriteString("\n```diff\n")
			w.WriteString(patch)
			if !strings.HasSuffix(patch, "\n") {
				w.WriteString("\n")
			}
			w.WriteString("```\n")
			w.WriteString(note)
		}
		w.WriteString("\n")
		b.WriteString(w.String())
	}

	// The turns take what is left, newest first; room is kept for the
	// note that names what was cut.
	const reserve = 300
	if len(in.Turns) > 0 {
		b.WriteString("## Turns, newest first\n\n")
	}
	room := limit - b.Len() - reserve
	cut := 0
	var one strings.Builder
	for i := len(in.Turns) - 1; i >= 0; i-- {
		one.Reset()
		writeTurn(&one, in.Turns[i])
		if one.Len() > room {
			cut = i + 1
			for j := 0; j <= i; j++ {
				d.Cut = append(d.Cut, in.Turns[j].ID)
				d.CutBytes += turnSize(in.Turns[j])
			}
			break
		}
		room -= one.Len()
		b.WriteString(one.String())
	}
	for _, t := range in.Turns[cut:] {
		d.Turns = append(d.Turns, t.ID)
	}
	if len(d.Cut) > 0 {
		fmt.Fprintf(&b, "_Left out to stay within %d bytes: %s (the oldest, about %d bytes). The pool keeps their full record._\n", limit, turnRange(d.Cut), d.CutBytes)
	}
	d.Text = b.String()
	if len(d.Text) > limit {
		// The fixed parts alone outgrow a small bound.
		d.Text = cutBytes(d.Text, limit-60) + "\n\n_(briefing cut at its bound)_\n"
	}
	d.Bytes = len(d.Text)
	return d
}

// writeTurn writes one turn of a briefing.
func writeTurn(w *strings.Builder, t briefTurn) {
	fmt.Fprintf(w, "### Turn %d · %s · %s\n\n", t.ID, t.Agent, endOf(t))
	w.WriteString("**User:** ")
	w.WriteString(quoteBlock(cutText(t.Prompt, maxBriefPrompt)))
	w.WriteString("\n")
	if len(t.Files) > 0 {
		w.WriteString("**Files changed:**\n")
		writeFiles(w, t.Files)
		w.WriteString("\n")
	}
	w.WriteString("**Answer:** ")
	if strings.TrimSpace(t.Answer) == "" {
		w.WriteString("_(no text)_\n\n")
	} else {
		w.WriteString(quoteBlock(cutText(t.Answer, maxBriefAnswer)))
		w.WriteString("\n")
	}
}

// turnSize is about what writeTurn writes for t.
func turnSize(t briefTurn) int {
	return 80 + min(len(t.Prompt), maxBriefPrompt) + min(len(t.Answer), maxBriefAnswer) + 40*min(len(t.Files), maxBriefFiles)
}

// endOf says how turn t ended.
func endOf(t briefTurn) string {
	if !t.Ended {
		return "did not end normally (no end recorded)"
	}
	s := t.StopReason
	if s == "" {
		s = "ended"
	}
	if t.Error != "" {
		s += ", error: " + oneLine(t.Error, 300)
	}
	if t.Stat != nil && t.Stat.Files > 0 {
		s += fmt.Sprintf(", %s changed (+%d −%d)", files(t.Stat.Files), t.Stat.Additions, t.Stat.Deletions)
	} else {
		s += ", no files changed"
	}
	return s
}

// writeFiles lists files with their diff stat, at most maxBriefFiles.
func writeFiles(w *strings.Builder, files []TurnFile) {
	for i, f := range files {
		if i == maxBriefFiles {
			fmt.Fprintf(w, "- … and %d more\n", len(files)-i)
			break
		}
		st := ""
		if f.Status != "" {
			st = f.Status + " "
		}
		fmt.Fprintf(w, "- %s`%s` (+%d −%d)\n", st, f.Path, f.Additions, f.Deletions)
	}
}

// fileList is the TurnFile list of changes, at most maxTurnFiles.
func fileList(changes []FileChange) []TurnFile {
	out := make([]TurnFile, 0, min(len(changes), maxTurnFiles))
	for _, c := range changes[:min(len(changes), maxTurnFiles)] {
		out = append(out, TurnFile{Path: c.Path, Status: c.Status, Additions: c.Additions, Deletions: c.Deletions})
	}
	return out
}

// files is "1 file" or "n files".
func files(n int) string {
	if n == 1 {
		return "1 file"
	}
	return strconv.Itoa(n) + " files"
}

// quoteBlock makes s a Markdown block quote.
func quoteBlock(s string) string {
	s = strings.TrimRight(s, "\n")
	return "\n> " + strings.ReplaceAll(s, "\n", "\n> ") + "\n"
}

// oneLine is s on one line, cut to n bytes.
func oneLine(s string, n int) string {
	return cutText(strings.Join(strings.Fields(s), " "), n)
}

// cutText is s cut to about n bytes, saying how much was cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	kept := cutBytes(s, max(n-40, 0))
	return kept + " … [" + strconv.Itoa(len(s)-len(kept)) + " bytes cut]"
}

// cutBytes is the longest prefix of s of at most n bytes that ends at a
// character boundary.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// turnRange names turns ids: "turn 3", "turns 1–4", "turns 1, 3, 5".
func turnRange(ids []int64) string {
	switch {
	case len(ids) == 1:
		return fmt.Sprintf("turn %d", ids[0])
	case ids[len(ids)-1]-ids[0] == int64(len(ids)-1):
		return fmt.Sprintf("turns %d–%d", ids[0], ids[len(ids)-1])
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return "turns " + strings.Join(parts, ", ")
}
