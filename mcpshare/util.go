package mcpshare

import (
	"path/filepath"
	"strings"
)

// baseEnv is what a server gets of the daemon's environment: the program
// search path and the locale, nothing else (no credential of the daemon's).
func baseEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || k == "LANG" || k == "TZ" || strings.HasPrefix(k, "LC_") {
			out = append(out, kv)
		}
	}
	return out
}

// stateEnv is the environment of a server whose state directory is dir:
// base, then its home and caches in dir, then its own variables.
func stateEnv(base []string, dir string, own map[string]string) []string {
	out := append([]string{}, base...)
	out = append(out, "HOME="+dir, "TMPDIR="+filepath.Join(dir, "tmp"),
		"XDG_CACHE_HOME="+filepath.Join(dir, ".cache"), "XDG_CONFIG_HOME="+filepath.Join(dir, ".config"),
		"XDG_DATA_HOME="+filepath.Join(dir, ".local", "share"), "XDG_STATE_HOME="+filepath.Join(dir, ".local", "state"))
	for k, v := range own {
		out = append(out, k+"="+v)
	}
	return out
}

// lookEnv returns the last value of name in env.
func lookEnv(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}
