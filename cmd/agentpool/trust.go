package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// maxSymlinkHops bounds the symlinks followed while checking one path, as
// the kernel's own limit (ELOOP) does.
const maxSymlinkHops = 40

// groupOtherWrite is the part of a mode that lets others than the owner
// write.
const groupOtherWrite fs.FileMode = 0o022

// untrustedError says why a path cannot be trusted: which entry on the
// way to it fails which rule, what was found, and how to fix it.
type untrustedError struct {
	// Path is the file or directory that was checked.
	Path string
	// Entry is what fails: Path itself (resolved), a directory on the
	// way to it, or a symlink followed to reach it.
	Entry string
	// Why says what is wrong with Entry, e.g. "owned by uid 65534
	// (nobody), not by you (uid 0)".
	Why string
	// Fix says what the owner of the machine can do about it.
	Fix string
	// Loose is set when Entry is Path, belongs to the caller, and only
	// its mode is too open: tightening the mode makes it trusted.
	Loose bool
}

func (e *untrustedError) Error() string {
	if e.Entry == e.Path {
		return fmt.Sprintf("%s: %s (%s)", e.Path, e.Why, e.Fix)
	}
	return fmt.Sprintf("%s: %s is %s (%s)", e.Path, e.Entry, e.Why, e.Fix)
}

// Reason is the error without the path checked, for messages that name
// it already.
func (e *untrustedError) Reason() string {
	if e.Entry == e.Path {
		return e.Why
	}
	return e.Entry + " is " + e.Why
}

// trustChecker applies the ownership rules of the data directory and the
// files in it, those of OpenSSH's StrictModes (secure_path), for the user
// euid.
type trustChecker struct {
	euid uint32
}

// checkTrusted checks path with the rules of trustChecker.check for the
// effective user of this process.
func checkTrusted(path string) (string, error) {
	return trustChecker{euid: uint32(os.Geteuid())}.check(path)
}

// check says whether path (a file or a directory) may be trusted: whether
// only its user, or root, can have put it there and written it. It walks
// the path from "/" one entry at a time, following symlinks as the kernel
// does, and checks every entry it meets:
//
//   - path itself (once resolved) must be owned by the user, and not be
//     writable by group or others;
//   - every directory on the way must be owned by the user or root, and
//     not be writable by group or others unless it is sticky (as /tmp is:
//     others cannot rename or remove what they do not own there);
//   - every symlink followed must be owned by the user or root.
//
// It returns path resolved. When an entry does not exist, the error wraps
// fs.ErrNotExist (the entries before it passed); when a rule fails, it is
// an *untrustedError.
func (tc trustChecker) check(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("check %s: %w", path, err)
	}
	fi, err := os.Lstat("/")
	if err != nil {
		return "", fmt.Errorf("check %s: %w", path, err)
	}
	if len(splitPath(abs)) == 0 {
		return "/", tc.target(abs, "/", fi)
	}
	if err := tc.directory(abs, "/", fi); err != nil {
		return "", err
	}
	cur, rest, hops := "/", splitPath(abs), 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		if name == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", fmt.Errorf("check %s: %w", path, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if err := tc.symlink(abs, next, fi); err != nil {
				return "", err
			}
			if hops++; hops > maxSymlinkHops {
				return "", fmt.Errorf("check %s: %w", path, syscall.ELOOP)
			}
			link, err := os.Readlink(next)
			if err != nil {
				return "", fmt.Errorf("check %s: %w", path, err)
			}
			if filepath.IsAbs(link) {
				cur = "/"
			}
			rest = append(splitPath(link), rest...)
			continue
		}
		cur = next
		if len(rest) == 0 {
			return cur, tc.target(abs, cur, fi)
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("check %s: %s: %w", path, cur, syscall.ENOTDIR)
		}
		if err := tc.directory(abs, cur, fi); err != nil {
			return "", err
		}
	}
	// The path ended in a symlink to a directory on the way ("/a/.." or a
	// link to "/"): cur is the target.
	fi, err = os.Lstat(cur)
	if err != nil {
		return "", fmt.Errorf("check %s: %w", path, err)
	}
	return cur, tc.target(abs, cur, fi)
}

// splitPath returns the names of p, without empty ones and ".".
func splitPath(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}

// target checks the entry the path resolves to.
func (tc trustChecker) target(path, entry string, fi fs.FileInfo) error {
	uid := ownerOf(fi)
	if uid != tc.euid {
		return &untrustedError{Path: path, Entry: entry, Why: "owned by " + tc.owner(uid),
			Fix: "remove it, or chown it to you"}
	}
	if m := fi.Mode(); m.Perm()&groupOtherWrite != 0 {
		return &untrustedError{Path: path, Entry: entry, Loose: true,
			Why: fmt.Sprintf("writable by %s (mode %04o)", writers(m), m.Perm()),
			Fix: "make it yours alone: chmod go-w " + shellQuote(entry)}
	}
	return nil
}

// directory checks a directory on the way to the target.
func (tc trustChecker) directory(path, dir string, fi fs.FileInfo) error {
	uid := ownerOf(fi)
	if uid != tc.euid && uid != 0 {
		return &untrustedError{Path: path, Entry: dir, Why: fmt.Sprintf("owned by %s, neither you (uid %d) nor root, who could replace what it holds",
			describeUID(uid), tc.euid), Fix: "use a path whose directories belong to you or root"}
	}
	if m := fi.Mode(); m.Perm()&groupOtherWrite != 0 && m&fs.ModeSticky == 0 {
		return &untrustedError{Path: path, Entry: dir,
			Why: fmt.Sprintf("writable by %s and not sticky (mode %04o), so another user could replace what it holds",
				writers(m), m.Perm()),
			Fix: "chmod go-w " + shellQuote(dir) + " (or chmod +t), or use another path"}
	}
	return nil
}

// symlink checks a symlink followed on the way to the target.
func (tc trustChecker) symlink(path, link string, fi fs.FileInfo) error {
	if uid := ownerOf(fi); uid != tc.euid && uid != 0 {
		return &untrustedError{Path: path, Entry: link, Why: "a symlink owned by " + tc.owner(uid),
			Fix: "use the path it points to, or a symlink of your own"}
	}
	return nil
}

// owner describes uid for a message: "uid 65534 (nobody), not by you
// (uid 1000)".
func (tc trustChecker) owner(uid uint32) string {
	return fmt.Sprintf("%s, not by you (uid %d)", describeUID(uid), tc.euid)
}

// describeUID is "uid N (name)", or "uid N" when the user database does
// not know it.
func describeUID(uid uint32) string {
	s := "uid " + strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil && u.Username != "" {
		s += " (" + u.Username + ")"
	}
	return s
}

// writers names who besides the owner may write, by mode m.
func writers(m fs.FileMode) string {
	switch {
	case m&0o020 != 0 && m&0o002 != 0:
		return "group and others"
	case m&0o020 != 0:
		return "group"
	}
	return "others"
}

// ownerOf is the owner of the file fi describes.
func ownerOf(fi fs.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return ^uint32(0) // unknown: nobody's
}

// refusal turns an *untrustedError about path into the error of a reader
// that refuses it; other errors are returned as they are.
func refusal(path string, err error) error {
	if ue, ok := isUntrusted(err); ok {
		return fmt.Errorf("refusing %s, which another user could have written: %s: %s", path, ue.Reason(), ue.Fix)
	}
	return err
}

// isUntrusted reports whether err is an *untrustedError, and returns it.
func isUntrusted(err error) (*untrustedError, bool) {
	var ue *untrustedError
	ok := errors.As(err, &ue)
	return ue, ok
}
