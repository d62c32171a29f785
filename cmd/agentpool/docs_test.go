package main

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository's top, from this package's directory.
const repoRoot = "../.."

// docPages reads README.md and docs/*.md, by their paths from the
// repository's top ("README.md", "docs/agents.md").
func docPages(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages := make(map[string]string)
	for _, name := range append([]string{filepath.Join(repoRoot, "README.md")}, names...) {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(repoRoot, name)
		if err != nil {
			t.Fatal(err)
		}
		pages[filepath.ToSlash(rel)] = string(b)
	}
	if len(pages) < 2 {
		t.Fatalf("docPages found %d pages; want README.md and docs/*.md", len(pages))
	}
	return pages
}

// proseLines returns the lines of a Markdown page outside fenced code
// blocks, and those inside ```sh blocks, with their line numbers.
func proseLines(page string) (prose, sh map[int]string) {
	prose, sh = make(map[int]string), make(map[int]string)
	fence, lang := false, ""
	for i, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "```") {
			fence, lang = !fence, strings.TrimPrefix(l, "```")
			continue
		}
		switch {
		case !fence:
			prose[i+1] = l
		case lang == "sh":
			sh[i+1] = l
		}
	}
	return prose, sh
}

var headingRE = regexp.MustCompile(`^#{1,6} +(.+?) *#*$`)

// headingSlugs returns the anchors GitHub gives the headings of a page:
// lower case, punctuation dropped, spaces as hyphens, a repeated one
// numbered from -1.
func headingSlugs(page string) map[string]bool {
	prose, _ := proseLines(page)
	slugs, seen := make(map[string]bool), make(map[string]int)
	for _, l := range prose {
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.M, r):
				return unicode.ToLower(r)
			}
			return -1
		}, m[1])
		if n := seen[s]; n > 0 {
			slugs[s+"-"+strconv.Itoa(n)] = true
		} else {
			slugs[s] = true
		}
		seen[s]++
	}
	return slugs
}

var (
	codeSpanRE = regexp.MustCompile("`[^`]*`")
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// TestDocsLinksResolve: every relative link of README.md and docs/*.md
// names a file of the repository and, with #anchor, a heading of it, so
// that moving a section between pages cannot leave a link behind.
func TestDocsLinksResolve(t *testing.T) {
	pages := docPages(t)
	slugs := make(map[string]map[string]bool)
	for name, page := range pages {
		slugs[name] = headingSlugs(page)
	}
	for name, page := range pages {
		prose, _ := proseLines(page)
		for n, l := range prose {
			for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(l, ""), -1) {
				target := m[1]
				if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				if file == "" {
					file = name
				} else {
					file = path.Clean(path.Join(path.Dir(name), file))
				}
				if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(file))); err != nil || strings.HasPrefix(file, "../") {
					t.Errorf("%s:%d links to %q: %s is not a file of the repository", name, n, target, file)
					continue
				}
				if anchor == "" {
					continue
				}
				if s, ok := slugs[file]; !ok || !s[anchor] {
					t.Errorf("%s:%d links to %q: %s has no heading #%s", name, n, target, file, anchor)
				}
			}
		}
	}
}

// docGroups are the commands whose first argument names a subcommand.
var docGroups = map[string]bool{"session": true, "sessions": true, "providers": true, "permissions": true, "attempt": true, "attempts": true, "logins": true}

// TestDocsCommandsExist: every agentpool command line of the README and
// docs/*.md (in ```sh blocks, or after a "$ " prompt) names a command the
// binary has, and every --flag it passes is one that command's help lists.
func TestDocsCommandsExist(t *testing.T) {
	cmdRE := regexp.MustCompile(`^\s*(?:\$ )?(?:\./bin/)?agentpool\s+(.*)$`)
	wordRE := regexp.MustCompile(`^[a-z][a-z-]*$`)
	flagRE := regexp.MustCompile(`(?:^|[\s\[])(--[a-z][a-z-]*)`)
	checked := 0
	for name, page := range docPages(t) {
		prose, sh := proseLines(page)
		lines := sh // plus the prompted lines of other blocks and prose
		for n, l := range prose {
			if strings.HasPrefix(l, "$ ") {
				lines[n] = l
			}
		}
		for n, l := range lines {
			for strings.HasSuffix(l, `\`) && lines[n+1] != "" { // a command continued on the next line
				n++
				l = strings.TrimSuffix(l, `\`) + " " + lines[n]
			}
			m := cmdRE.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			line, _, _ := strings.Cut(m[1], " #") // a comment
			fields := strings.Fields(line)
			args := fields[:1]
			if docGroups[fields[0]] && len(fields) > 1 && wordRE.MatchString(fields[1]) {
				args = fields[:2]
			}
			var out, errOut bytes.Buffer
			var err error
			if args[0] == "serve" {
				err = runServe(t.Context(), []string{"--help"}, &out, &out)
			} else {
				c := &cli{env: ClientEnv{Home: t.TempDir()}, stdin: strings.NewReader(""), stdout: &out, stderr: &errOut}
				var handled bool
				handled, err = c.run(t.Context(), args[0], append(args[1:], "--help"))
				if !handled {
					t.Errorf("%s:%d: %q: agentpool has no command %q", name, n, l, args[0])
					continue
				}
			}
			if err != nil {
				t.Errorf("%s:%d: %q: %s --help: %v (%s)", name, n, l, strings.Join(args, " "), err, errOut.String())
				continue
			}
			checked++
			for _, f := range flagRE.FindAllStringSubmatch(line, -1) {
				if !regexp.MustCompile(`\n\s+` + regexp.QuoteMeta(f[1]) + `\b`).MatchString(out.String()) {
					t.Errorf("%s:%d: %q passes %s, which %s --help does not list:\n%s", name, n, l, f[1], strings.Join(args, " "), out.String())
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d command lines; want the docs' commands (did the format change?)", checked)
	}
}

// TestReadmeIsOnePage: the README stays one page a newcomer reads in five
// minutes (at most 1,400 words, about 250 a minute, and 160 lines): the
// two commands, a real agent, the ideas, and a link to every page of
// docs/, where the rest is.
func TestReadmeIsOnePage(t *testing.T) {
	pages := docPages(t)
	readme := pages["README.md"]
	if n := len(strings.Fields(readme)); n > 1400 {
		t.Errorf("README.md has %d words; want at most 1400 (five minutes' reading): move the details to a page of docs/", n)
	}
	if n := strings.Count(readme, "\n"); n > 160 {
		t.Errorf("README.md has %d lines; want at most 160: move the details to a page of docs/", n)
	}
	for _, want := range []string{"make run", "make test", "## Quick start", "## A real agent", "## The ideas",
		"**Session.**", "**Worktree.**", "**Provider.**", "**Confinement.**", "**Permissions.**"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
	for name := range pages {
		if name != "README.md" && !strings.Contains(readme, "]("+name+")") {
			t.Errorf("README.md does not link %s: a page of docs/ nobody finds from the README", name)
		}
	}
}
