package pty

import (
	"regexp"
	"strings"
	"unicode"
)

// minEchoPiece is the shortest piece of a wrapped prompt recognised as its
// echo on a row of its own.
const minEchoPiece = 8

// turnText returns the text that appeared on the screen during a turn: the
// rows of after that a longest-common-subsequence diff does not match with
// rows of before (rows that scrolled up still match), less the rows in skip
// (the ready prompt), the rows that match one of ignore (the program's
// chrome), the echo of prompt wherever it is among them, and blank rows at
// either end. Text that scrolled off the top of the screen during the turn
// is not on it any more and is missing; pty.output carries it raw.
func turnText(before, after []string, prompt string, skip map[int]bool, ignore []*regexp.Regexp) string {
	inserted := insertedRows(before, after)
	var rows []string
	for _, i := range inserted {
		if !skip[i] && !ignored(after[i], ignore) {
			rows = append(rows, strings.TrimRight(after[i], " "))
		}
	}
	rows = dropEcho(rows, prompt)
	for len(rows) > 0 && strings.TrimSpace(rows[0]) == "" {
		rows = rows[1:]
	}
	for len(rows) > 0 && strings.TrimSpace(rows[len(rows)-1]) == "" {
		rows = rows[:len(rows)-1]
	}
	return strings.Join(rows, "\n")
}

// ignored reports whether row matches one of the patterns.
func ignored(row string, patterns []*regexp.Regexp) bool {
	for _, re := range patterns {
		if re.MatchString(row) {
			return true
		}
	}
	return false
}

// insertedRows returns the indexes of the rows of after that are not part
// of a longest common subsequence with before.
func insertedRows(before, after []string) []int {
	n, m := len(before), len(after)
	// lcs[i][j] is the LCS length of before[i:] and after[j:].
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if before[i] == after[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []int
	i, j := 0, 0
	for j < m {
		switch {
		case i < n && before[i] == after[j]:
			i++
			j++
		case i < n && lcs[i+1][j] >= lcs[i][j+1]:
			i++
		default:
			out = append(out, j)
			j++
		}
	}
	return out
}

// dropEcho removes the echo of the prompt from rows: the first row that
// holds its beginning and the rows its wrapped remainder fills, until the
// whole prompt has been seen. The first non-blank row may hold the echo
// anywhere (after whatever the program prints before it); a later row
// only after a prompt marker, a few characters that are not letters or
// digits ("❯ ", "> "), so that an answer quoting the prompt stays.
func dropEcho(rows []string, prompt string) []string {
	want := normalizeSpace(prompt)
	if want == "" {
		return rows
	}
	first := true
	for i, row := range rows {
		r := normalizeSpace(row)
		if r == "" {
			continue
		}
		if n := echoRows(rows[i:], want, first); n > 0 {
			return append(rows[:i:i], rows[i+n:]...)
		}
		first = false
	}
	return rows
}

// echoRows returns how many rows at the start of rows echo prompt
// (normalised), or 0. anywhere allows the echo to start anywhere on the
// first row, not only after a prompt marker.
func echoRows(rows []string, prompt string, anywhere bool) int {
	r := normalizeSpace(rows[0])
	if i := strings.Index(r, prompt); i >= 0 && (anywhere || isMarker(r[:i])) {
		return 1
	}
	k := echoSuffix(r, prompt)
	if k == 0 || (!anywhere && !isMarker(r[:len(r)-k])) {
		return 0
	}
	rest := strings.TrimSpace(prompt[k:])
	n := 1
	for n < len(rows) && rest != "" {
		r := normalizeSpace(rows[n])
		switch {
		case r == "":
		case strings.HasPrefix(rest, r):
			rest = strings.TrimSpace(rest[len(r):])
		case strings.HasPrefix(r, rest):
			rest = ""
		default:
			return n
		}
		n++
	}
	return n
}

// maxMarker is the longest prompt marker before an echo, in bytes.
const maxMarker = 8

// isMarker reports whether s can be the prompt marker before an echo:
// short, without letters or digits.
func isMarker(s string) bool {
	if len(s) > maxMarker {
		return false
	}
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return false
		}
	}
	return true
}

// echoSuffix returns the length of the longest suffix of row that starts
// prompt, if it is long enough to be taken for its echo.
func echoSuffix(row, prompt string) int {
	for i := 0; i < len(row); i++ {
		s := row[i:]
		if len(s) < minEchoPiece && len(s) < len(prompt) {
			return 0
		}
		if strings.HasPrefix(prompt, s) {
			return len(s)
		}
	}
	return 0
}

func normalizeSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

// readyRows returns the rows to leave out of the turn's text: those the
// last match of the ready pattern spans and the row of a visible cursor,
// where the program waits for input.
func readyRows(pattern *regexp.Regexp, rows []string, cur Cursor) map[int]bool {
	skip := map[int]bool{}
	if cur.Visible {
		skip[cur.Y] = true
	}
	if pattern == nil {
		return skip
	}
	text := strings.Join(rows, "\n")
	all := pattern.FindAllStringIndex(text, -1)
	if len(all) == 0 {
		return skip
	}
	loc := all[len(all)-1]
	first := strings.Count(text[:loc[0]], "\n")
	last := first
	if loc[1] > loc[0] {
		last = strings.Count(text[:loc[1]-1], "\n")
	}
	for y := first; y <= last; y++ {
		skip[y] = true
	}
	return skip
}
