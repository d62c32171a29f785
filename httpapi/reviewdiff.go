package httpapi

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agentpool/agentpool/pool"
)

// NearLines is how close (in lines, either way) a turn's change must be to
// a review comment's line for the comment to count as addressed by it.
const NearLines = 2

// patchLine is one line of a hunk of a unified diff.
type patchLine struct {
	// Kind is ' ' (context), '-' (removed) or '+' (added).
	Kind byte
	// Old is the line's number in the old file; for an added line, the
	// number of the old line it was inserted before. New is its number
	// in the new file (for a removed line, of the new line after it).
	Old, New int
	Text     string
}

// patchFile is one file of a unified diff.
type patchFile struct {
	OldPath, NewPath string
	Lines            []patchLine
}

// parsePatch reads git's unified diff into files keyed by their new path
// (their old path for a deleted file) and, when it differs, their old one.
// Quoted paths (with unusual characters) keep their quotes.
func parsePatch(patch string) map[string]*patchFile {
	files := map[string]*patchFile{}
	var cur *patchFile
	var oldNo, newNo int
	inHunk := false
	add := func() {
		if cur == nil {
			return
		}
		for _, p := range []string{cur.NewPath, cur.OldPath} {
			if p != "" {
				if _, ok := files[p]; !ok {
					files[p] = cur
				}
			}
		}
	}
	for _, ln := range strings.Split(patch, "\n") {
		switch {
		case strings.HasPrefix(ln, "diff --git "):
			add()
			cur, inHunk = &patchFile{}, false
		case cur == nil:
		case !inHunk && strings.HasPrefix(ln, "--- "):
			cur.OldPath = patchPath(ln[4:], "a/")
		case !inHunk && strings.HasPrefix(ln, "+++ "):
			cur.NewPath = patchPath(ln[4:], "b/")
		case strings.HasPrefix(ln, "@@ "):
			o, n, ok := hunkStart(ln)
			inHunk = ok
			oldNo, newNo = o, n
		case inHunk && ln != "" && (ln[0] == ' ' || ln[0] == '-' || ln[0] == '+'):
			pl := patchLine{Kind: ln[0], Old: oldNo, New: newNo, Text: ln[1:]}
			cur.Lines = append(cur.Lines, pl)
			switch ln[0] {
			case ' ':
				oldNo++
				newNo++
			case '-':
				oldNo++
			case '+':
				newNo++
			}
		}
	}
	add()
	return files
}

// patchPath strips git's a/ or b/ prefix; /dev/null is no path.
func patchPath(p, prefix string) string {
	p = strings.TrimSuffix(p, "\t")
	if p == "/dev/null" {
		return ""
	}
	return strings.TrimPrefix(p, prefix)
}

// hunkStart reads "@@ -o[,n] +n[,m] @@" into its starting line numbers (a
// count of 0 starts after the line given, so the first line is o+1).
func hunkStart(ln string) (oldNo, newNo int, ok bool) {
	f := strings.Fields(ln)
	if len(f) < 3 || !strings.HasPrefix(f[1], "-") || !strings.HasPrefix(f[2], "+") {
		return 0, 0, false
	}
	num := func(s string) (int, bool) {
		start, count, hasCount := strings.Cut(s, ",")
		v, err := strconv.Atoi(start)
		if err != nil {
			return 0, false
		}
		if hasCount && count == "0" {
			v++
		}
		return v, true
	}
	o, ok1 := num(f[1][1:])
	n, ok2 := num(f[2][1:])
	return o, n, ok1 && ok2
}

// judgeComment says whether the turn whose diff is turnDiff (files parsed
// from its patch) and whose reply is reply addressed c, and how: the turn
// changed c's file at most NearLines from c's line (a comment on a removed
// line: changed its file at all), deleted or renamed the file, or the reply
// names c's path:line (or the file's base name with the line).
func judgeComment(c pool.ReviewComment, turnDiff pool.Diff, files map[string]*patchFile, reply string) (bool, string) {
	for _, fc := range turnDiff.Files {
		if fc.Path != c.Path && fc.OldPath != c.Path {
			continue
		}
		if fc.Status == "deleted" || (fc.OldPath == c.Path && fc.Path != c.Path) || c.Side == pool.SideOld {
			return true, pool.AddressedByDiff
		}
		pf := files[c.Path]
		if pf == nil && (fc.Binary || turnDiff.Truncated) {
			return true, pool.AddressedByDiff // changed, lines unknown
		}
		if pf != nil {
			for _, l := range pf.Lines {
				if l.Kind != ' ' && l.Old >= c.Line-NearLines && l.Old <= c.Line+NearLines {
					return true, pool.AddressedByDiff
				}
			}
		}
	}
	if namesLocation(reply, c.Path, c.Line) {
		return true, pool.AddressedByReply
	}
	return false, ""
}

// namesLocation reports whether text names path:line, or base:line for
// path's base name, not followed by another digit.
func namesLocation(text, path string, line int) bool {
	names := []string{path}
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		names = append(names, path[i+1:])
	}
	for _, n := range names {
		loc := fmt.Sprintf("%s:%d", n, line)
		for rest := text; ; {
			i := strings.Index(rest, loc)
			if i < 0 {
				break
			}
			end := i + len(loc)
			if end == len(rest) || rest[end] < '0' || rest[end] > '9' {
				return true
			}
			rest = rest[end:]
		}
	}
	return false
}
