package acpfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// shellPath runs a terminal's whole shell line.
const shellPath = "/bin/sh"

// shellSyntax are the characters that make an argument-less command a shell
// line rather than a program name.
const shellSyntax = " \t\n|&;<>()$`\\\"'*?[]#~=%{}!"

// cwd opens a terminal's cwd ("" = the root) and returns it with its
// absolute path, for events. The directory is opened once, through the
// Guard's os.Root and without following a final symlink, and checked to be a
// directory: the command then starts in that open directory (see dirOf), so
// a symlink swapped in after the check cannot move it outside the worktree.
// Errors wrap the Guard's errors, ErrNotFound or ErrNotDirectory. The caller
// closes dir once the command has started.
func (t *Terminals) cwd(p string) (dir *os.File, abs string, err error) {
	real := "."
	if p != "" {
		if _, real, err = t.guard.resolve(p); err != nil {
			return nil, "", fmt.Errorf("terminal cwd: %w", err)
		}
	}
	dir, err = t.guard.root.OpenFile(real, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, "", fmt.Errorf("terminal cwd %q: %w", p, ErrNotFound)
		case errors.Is(err, syscall.ENOTDIR):
			return nil, "", fmt.Errorf("terminal cwd %q: %w", p, ErrNotDirectory)
		}
		return nil, "", fmt.Errorf("terminal cwd: %w", t.guard.opError(p, err))
	}
	fi, err := dir.Stat()
	if err != nil || !fi.IsDir() {
		dir.Close()
		if err == nil {
			err = ErrNotDirectory
		}
		return nil, "", fmt.Errorf("terminal cwd %q: %w", p, err)
	}
	return dir, filepath.Join(t.guard.Root(), real), nil
}

// dirOf names the open directory dir for exec.Cmd.Dir. The child changes
// into it before it execs, while it still holds dir's descriptor (inherited
// across fork; close-on-exec closes it only at exec), so the name is
// resolved to that very directory, not to whatever its path names by then.
func dirOf(dir *os.File) string {
	return "/proc/self/fd/" + strconv.Itoa(int(dir.Fd()))
}

// mergeEnv returns base with add applied: a name in add replaces the base
// entries of that name.
func mergeEnv(base []string, add []EnvVar) ([]string, error) {
	if len(add) == 0 {
		return base, nil
	}
	names := make(map[string]bool, len(add))
	for _, v := range add {
		if v.Name == "" || strings.ContainsAny(v.Name, "=\x00") || strings.IndexByte(v.Value, 0) >= 0 {
			return nil, fmt.Errorf("terminal env %q: invalid variable", v.Name)
		}
		names[v.Name] = true
	}
	env := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !names[name] {
			env = append(env, kv)
		}
	}
	for _, v := range add {
		env = append(env, v.Name+"="+v.Value)
	}
	return env, nil
}

// command returns the program and arguments to run for req: /bin/sh -c for
// an argument-less shell line, else the program found in env's PATH, or the
// path as given when it has a slash: a relative one is resolved by the child
// against its opened cwd (exec.Cmd evaluates a relative Path in Dir).
func command(req TerminalRequest, env []string) (string, []string, error) {
	if req.Command == "" {
		return "", nil, errors.New("terminal: empty command")
	}
	if strings.IndexByte(req.Command, 0) >= 0 {
		return "", nil, fmt.Errorf("terminal command %q: %w", req.Command, ErrNulByte)
	}
	for _, a := range req.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return "", nil, fmt.Errorf("terminal argument %q: %w", a, ErrNulByte)
		}
	}
	if len(req.Args) == 0 && strings.ContainsAny(req.Command, shellSyntax) {
		return shellPath, []string{"-c", req.Command}, nil
	}
	if strings.Contains(req.Command, "/") {
		return req.Command, req.Args, nil
	}
	p, err := lookPath(req.Command, envValue(env, "PATH"))
	if err != nil {
		return "", nil, err
	}
	return p, req.Args, nil
}

// lookPath finds an executable named name in the absolute directories of
// path (relative entries are skipped, as exec.LookPath refuses them).
func lookPath(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("terminal command %q: not found in PATH: %w", name, fs.ErrNotExist)
}

// envValue returns the last value of name in env.
func envValue(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
			return v
		}
	}
	return ""
}

// relCwd returns the absolute cwd relative to the worktree root.
func (t *Terminals) relCwd(abs string) string {
	rel, err := filepath.Rel(t.guard.Root(), abs)
	if err != nil {
		return abs
	}
	return rel
}
