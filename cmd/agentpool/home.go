package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Where the data directory comes from, as findHome reports it.
const (
	homeFromEnv     = "from $AGENTPOOL_HOME"
	homeFromNearest = "the nearest .agentpool at or above the current directory"
	homeFromUser    = "the per-user default: no .agentpool at or above the current directory, and $AGENTPOOL_HOME is not set"
	// homeFromUserIgnored is homeFromUser when a nearest .agentpool was
	// found but cannot be trusted.
	homeFromUserIgnored = "the per-user default: the nearest .agentpool at or above the current directory was ignored, as warned, and $AGENTPOOL_HOME is not set"
)

// userStateDir is the per-user data directory under $XDG_STATE_HOME, or
// under ~/.local/state.
const userStateDir = "agentpool"

// findHome returns the data directory and how it was chosen. The daemon
// (serve) and the client use the same rule, so that a client run anywhere
// in a tree finds the daemon started for that tree:
//
//  1. $AGENTPOOL_HOME, when set;
//  2. else the nearest directory named .agentpool in cwd or one of its
//     ancestors, looking no higher than the user's home directory when
//     cwd is inside it (so ~/.agentpool may count, /home/.agentpool not),
//     unless another user owns it or controls a directory or symlink on
//     the way to it (see trustChecker): such a one is ignored, with a
//     warning to warn saying why;
//  3. else the per-user default, $XDG_STATE_HOME/agentpool, or
//     ~/.local/state/agentpool when XDG_STATE_HOME is not set (or not
//     absolute, as the XDG spec says to ignore it then).
//
// getenv reads the environment; cwd is the current directory ("" when
// unknown). Without a home directory or XDG_STATE_HOME, the last resort is
// ./.agentpool. A home found by rule 1 or 3 is not checked here: its user
// chose it, so the daemon and the client refuse it, with the reason, when
// it cannot be trusted.
func findHome(getenv func(string) string, cwd string, warn io.Writer) (home, from string) {
	if h := getenv("AGENTPOOL_HOME"); h != "" {
		return h, homeFromEnv
	}
	userHome := getenv("HOME")
	if userHome != "" {
		userHome = filepath.Clean(userHome)
	}
	fromUser := homeFromUser
	if cwd != "" {
		near, ignored := nearestHome(filepath.Clean(cwd), userHome, warn)
		if near != "" {
			return near, homeFromNearest
		}
		if ignored {
			fromUser = homeFromUserIgnored
		}
	}
	if d := userDefaultHome(getenv); d != "" {
		return d, fromUser // pointer.go
	}
	return defaultHomeDir, "the current directory's .agentpool (no home directory to put one in)"
}

// nearestHome returns the nearest .agentpool in dir or its ancestors, up
// to userHome when dir is inside it, or "". The first one found that
// another user controls ends the search: it is reported to warn and
// ignored is set. One of the user's own that group or others may write
// is returned: it is theirs to fix (serve narrows it; the client says
// how).
func nearestHome(dir, userHome string, warn io.Writer) (home string, ignored bool) {
	for {
		if cand := filepath.Join(dir, defaultHomeDir); isDir(cand) {
			_, err := checkTrusted(cand)
			ue, untrusted := isUntrusted(err)
			if err == nil || untrusted && ue.Loose {
				return cand, false
			}
			reason := err.Error()
			if untrusted {
				reason = cand + ": " + ue.Reason()
			}
			fmt.Fprintf(warn, "agentpool: warning: ignoring %s; using the per-user data directory instead\n", reason)
			return "", true
		}
		parent := filepath.Dir(dir)
		if dir == userHome || parent == dir {
			return "", false
		}
		dir = parent
	}
}

// isDir reports whether path is a directory (or a symlink to one).
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// readTrusted reads the file at path if it can be trusted (see
// trustChecker). A missing file is an error wrapping fs.ErrNotExist; an
// untrusted one an error that says why and what to do.
func readTrusted(path string) ([]byte, error) {
	real, err := checkTrusted(path)
	if err != nil {
		return nil, refusal(path, err)
	}
	return os.ReadFile(real)
}

// checkHome refuses a data directory that cannot be trusted (see
// trustChecker), saying why and how to choose another one. One that does
// not exist passes: there is no daemon to find in it.
func (c *cli) checkHome() error {
	_, err := checkTrusted(c.env.Home)
	ue, ok := isUntrusted(err)
	if !ok {
		return nil
	}
	from := ""
	if c.env.HomeFrom != "" {
		from = " (" + c.env.HomeFrom + ")"
	}
	return fmt.Errorf("refusing the data directory %s%s: %s: %s; or choose another one with AGENTPOOL_HOME=DIR",
		c.env.Home, from, ue.Reason(), ue.Fix)
}
