package pty

import (
	"regexp"
	"strings"
)

// minEchoPiece is the shortest piece of a wrapped prompt recognised as its
// echo on a row of its own.
const minEchoPiece = 8

// turnText returns the text that appeared on the screen during a turn: the
// rows of after that a longest-common-subsequence diff does not match with
// rows of before (rows that scrolled up still match), less the rows in skip
// (the ready prompt), the echo of prompt at the start, and blank rows at
// either end. Text that scrolled off the top of the screen during the turn
// is not on it any more and is missing; pty.output carries it raw.
func turnText(before, after []string, prompt string, skip map[int]bool) string {
	inserted := insertedRows(before, after)
	var rows []string
	for _, i := range inserted {
		if !skip[i] {
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

// dropEcho removes the rows at the start of rows that echo the prompt:
// the row holding its beginning (after whatever prompt marker precedes it)
// and the rows its wrapped remainder fills, until the whole prompt has been
// seen.
func dropEcho(rows []string, prompt string) []string {
	rest := normalizeSpace(prompt)
	if rest == "" {
		return rows
	}
	for len(rows) > 0 && rest != "" {
		r := normalizeSpace(rows[0])
		if r == "" {
			rows = rows[1:]
			continue
		}
		if strings.Contains(r, rest) {
			return rows[1:]
		}
		k := echoSuffix(r, rest)
		if k == 0 {
			break
		}
		rest = strings.TrimSpace(rest[k:])
		rows = rows[1:]
	}
	return rows
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
