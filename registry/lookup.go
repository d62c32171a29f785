package registry

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Provider statuses, as shown in ProviderStatus.Status.
const (
	// StatusReady: enabled, its program found; Resolve returns a Spec.
	StatusReady = "ready"
	// StatusDisabled: "enabled": false in the config file.
	StatusDisabled = "disabled"
	// StatusNotInstalled: command[0] was not found.
	StatusNotInstalled = "not_installed"
	// StatusError: command[0] exists but cannot run, or the last probe
	// failed (Diagnostic says which; only the first blocks Resolve).
	StatusError = "error"
	// StatusProbing: a probe of the provider is running.
	StatusProbing = "probing"
	// StatusNeedsAuth: the agent refuses to work until the user logs in
	// (agentpool login); the last probe's Auth lists the ways.
	StatusNeedsAuth = "needs_auth"
)

// lookup is where a provider's program was found, or why not.
type lookup struct {
	// path is absolute, "" unless status is StatusReady.
	path   string
	status string
	// diag says why the program cannot run. It never carries the PATH
	// (which can be hundreds of characters): searched says it was
	// searched, and errors add it.
	diag     string
	searched bool
}

// lookPath finds the program name the way a shell would, in pathEnv rather
// than the process's PATH. A name with a slash is used as it is: "~/"
// means home, and a relative one is taken from baseDir (the config file's
// directory). Relative PATH entries are skipped, as exec does.
func lookPath(name, pathEnv, baseDir, home string) lookup {
	if strings.ContainsRune(name, '/') {
		p := name
		if rest, ok := strings.CutPrefix(name, "~/"); ok {
			p = filepath.Join(home, rest)
		} else if !filepath.IsAbs(p) {
			p = filepath.Join(baseDir, p)
		}
		p = filepath.Clean(p)
		switch err := executable(p); {
		case err == nil:
			return lookup{path: p, status: StatusReady}
		case missing(err):
			return lookup{status: StatusNotInstalled, diag: fmt.Sprintf("command %q: %s does not exist", name, p)}
		default:
			return lookup{status: StatusError, diag: fmt.Sprintf("command %q: %v", name, err)}
		}
	}
	var unusable error
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		err := executable(p)
		if err == nil {
			return lookup{path: p, status: StatusReady}
		}
		if !missing(err) && unusable == nil {
			unusable = err
		}
	}
	if unusable != nil {
		return lookup{status: StatusError, diag: fmt.Sprintf("command %q: %v", name, unusable)}
	}
	return lookup{status: StatusNotInstalled, diag: fmt.Sprintf("command %q not found in PATH", name), searched: true}
}

// missing reports whether err means there is no file at the path.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// executable reports whether p is a regular file with an execute bit.
func executable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return err
	case fi.IsDir():
		return &fs.PathError{Op: "exec", Path: p, Err: fmt.Errorf("is a directory")}
	case fi.Mode()&0o111 == 0:
		return &fs.PathError{Op: "exec", Path: p, Err: fmt.Errorf("not executable (mode %v)", fi.Mode().Perm())}
	}
	return nil
}
