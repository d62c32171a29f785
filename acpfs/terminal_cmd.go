package acpfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// shellPath runs a terminal's whole shell line.
const shellPath = "/bin/sh"

// shellSyntax are the characters that make an argument-less command a shell
// line rather than a program name.
const shellSyntax = " \t\n|&;<>()$`\\\"'*?[]#~=%{}!"

// cwd checks a terminal's cwd and returns it absolute: the root when empty,
// else a directory the guard accepts.
func (t *Terminals) cwd(p string) (string, error) {
	if p == "" {
		return t.guard.Root(), nil
	}
	_, real, err := t.guard.resolve(p)
	if err != nil {
		return "", fmt.Errorf("terminal cwd: %w", err)
	}
	fi, err := t.guard.root.Stat(real)
	if err != nil {
		return "", fmt.Errorf("terminal cwd: %w", t.guard.opError(p, err))
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("terminal cwd %q: %w", p, ErrNotDirectory)
	}
	return filepath.Join(t.guard.Root(), real), nil
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
// an argument-less shell line, else the program found in env's PATH (or
// relative to cwd when it has a slash).
func command(req TerminalRequest, cwd string, env []string) (string, []string, error) {
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
		p := req.Command
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		return p, req.Args, nil
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
