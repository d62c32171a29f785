package worktree

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxRefFile bounds what ReadHead reads of one file of a repository's
// git directory (HEAD, a loose ref, commondir); packed-refs is scanned a
// line at a time.
const maxRefFile = 4096

// ReadHead reads the commit that the checkout at top (a repository's top
// level, the directory that holds its .git) has as HEAD, from the files
// of its git directory alone, without running git: a .git directory or a
// "gitdir:" file, HEAD either detached or naming a branch, the branch as a
// loose ref or in packed-refs. It answers ok=false whenever it is not
// sure — any other layout (reftable, a symbolic ref naming another
// symbolic ref, an unborn branch, a file too large or unreadable) — and
// the caller then asks git. It reads only, so a repository it reads cannot
// make it run anything.
func ReadHead(top string) (commit string, ok bool) {
	gitDir, common, ok := gitDirs(top)
	if !ok {
		return "", false
	}
	head, ok := readSmall(filepath.Join(gitDir, "HEAD"))
	if !ok {
		return "", false
	}
	ref, symbolic := strings.CutPrefix(head, "ref: ")
	if !symbolic {
		return head, isObjectName(head)
	}
	if !strings.HasPrefix(ref, "refs/heads/") || !validRefName(ref) {
		return "", false
	}
	if v, found := readSmall(filepath.Join(common, filepath.FromSlash(ref))); found {
		return v, isObjectName(v)
	} else if _, err := os.Lstat(filepath.Join(common, filepath.FromSlash(ref))); !os.IsNotExist(err) {
		return "", false
	}
	return packedRef(filepath.Join(common, "packed-refs"), ref)
}

// gitDirs finds top's git directory and its common directory (where
// branches live; the same but for a linked worktree).
func gitDirs(top string) (gitDir, common string, ok bool) {
	dotGit := filepath.Join(top, ".git")
	fi, err := os.Lstat(dotGit)
	switch {
	case err != nil:
		return "", "", false
	case fi.IsDir():
		gitDir = dotGit
	case fi.Mode().IsRegular():
		line, ok := readSmall(dotGit)
		d, found := strings.CutPrefix(line, "gitdir: ")
		if !ok || !found || d == "" {
			return "", "", false
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(top, d)
		}
		gitDir = d
	default:
		return "", "", false
	}
	common = gitDir
	if c, found := readSmall(filepath.Join(gitDir, "commondir")); found {
		if !filepath.IsAbs(c) {
			c = filepath.Join(gitDir, c)
		}
		common = c
	} else if _, err := os.Lstat(filepath.Join(gitDir, "commondir")); !os.IsNotExist(err) {
		return "", "", false
	}
	cfg, ok := openRegular(filepath.Join(common, "config"))
	if !ok {
		return "", "", false
	}
	defer cfg.Close()
	if b, err := io.ReadAll(io.LimitReader(cfg, 1<<20)); err != nil || bytes.Contains(bytes.ToLower(b), []byte("refstorage")) {
		return "", "", false // reftable, or a config git must read itself
	}
	return gitDir, common, true
}

// openRegular opens path for reading if it is a regular file, never
// following a symlink and never blocking on what an agent could plant in
// its place (a FIFO): a ref an agent can write must not hang a create.
func openRegular(path string) (*os.File, bool) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, false
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, false
	}
	return f, true
}

// readSmall reads a one-line regular file of at most maxRefFile bytes,
// trimmed.
func readSmall(path string) (string, bool) {
	f, ok := openRegular(path)
	if !ok {
		return "", false
	}
	defer f.Close()
	buf := make([]byte, maxRefFile+1)
	n, _ := f.Read(buf)
	if n == 0 || n > maxRefFile {
		return "", false
	}
	s := strings.TrimSpace(string(buf[:n]))
	if strings.ContainsAny(s, "\n\r\x00") {
		return "", false
	}
	return s, true
}

// packedRef finds ref in a packed-refs file.
func packedRef(path, ref string) (string, bool) {
	f, ok := openRegular(path)
	if !ok {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue
		}
		name, r, found := strings.Cut(line, " ")
		if found && r == ref {
			return name, isObjectName(name)
		}
	}
	return "", false
}

// isObjectName says whether s is a full SHA-1 or SHA-256 object name in
// lower-case hex, as git writes them.
func isObjectName(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// validRefName refuses a ref that could leave the common directory.
func validRefName(ref string) bool {
	for _, part := range strings.Split(ref, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return !strings.ContainsAny(ref, "\\\x00")
}
