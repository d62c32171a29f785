package backends

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// An agent gets an allow-listed environment, never the daemon's whole
// one: a daemon started with PGPASSWORD, cloud credentials or a forge
// token in its environment must not hand them to every agent it runs
// (`env | grep ^PG` is all a hostile agent would need). The agent gets:
//
//   - the daemon's variables that BaseEnv names (the locale, the terminal,
//     the home and XDG directories, CA bundles);
//   - the daemon's variables its provider names in Spec.PassEnv (the
//     built-ins list those their agents read: ANTHROPIC_API_KEY for
//     claude, ...), and those the agent said it reads its credentials
//     from (Spec.AuthEnv), unless OwnerOnlyEnv;
//   - the provider's own Spec.Env, less its proxy variables.
//
// The daemon's own AGENTPOOL_* variables and the variables that name a
// socket of the user's session (NeverPassed) reach no agent, whatever
// the provider says.

// BaseEnv returns the names of the daemon's variables every agent gets:
// harmless ones that programs need to run as they would in the user's
// shell. A name ending in "*" is a prefix. Sockets (XDG_RUNTIME_DIR,
// DBUS_SESSION_BUS_ADDRESS, DISPLAY, SSH_AUTH_SOCK, ...) are not among
// them: they are not in an agent's world.
func BaseEnv() []string {
	return []string{
		"PATH", "HOME", "USER", "LOGNAME", "SHELL",
		"LANG", "LANGUAGE", "LC_*", "TZ",
		"TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR",
		"TMPDIR", "EDITOR", "VISUAL",
		"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME",
		"XDG_CONFIG_DIRS", "XDG_DATA_DIRS",
		"SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
	}
}

// neverPassed are the daemon's variables that reach no agent, whatever
// its provider says: they name sockets and files of the user's desktop
// session, which are not in an agent's world.
func neverPassed() []string {
	return []string{
		"XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS",
		"DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "SSH_AUTH_SOCK", "GPG_AGENT_INFO",
	}
}

// daemonPrefix starts the daemon's own variables: its token, address, data
// directory and store. They reach no agent, and no program the daemon
// starts for the user either (TrustedEnv).
const daemonPrefix = "AGENTPOOL_"

// storePrefix starts the variables of PostgreSQL's client library (libpq,
// pgx): PGPASSWORD, PGPASSFILE, PGHOST ... With "serve --store" they may
// carry the password of the daemon's own database.
const storePrefix = "PG"

// NeverPassed reports whether the daemon's variable name reaches no agent,
// even one whose provider names it: the daemon's own AGENTPOOL_*
// variables, and the sockets of the user's session.
func NeverPassed(name string) bool {
	return strings.HasPrefix(name, daemonPrefix) || slices.Contains(neverPassed(), name)
}

// ownerOnly are names and prefixes (ending in "*") of the variables that
// reach an agent only when its provider's owner names them, never
// because the agent said it reads its credentials from them: the
// daemon's store, cloud credentials, forge and registry tokens.
func ownerOnly() []string {
	return []string{
		storePrefix + "*", "DATABASE_URL",
		"AWS_*", "AZURE_*", "ARM_*", "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_*", "KUBECONFIG",
		"GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN", "GITLAB_TOKEN",
		"NPM_TOKEN", "NODE_AUTH_TOKEN", "VAULT_TOKEN", "KRB5CCNAME",
	}
}

// OwnerOnlyEnv reports whether the variable name may reach an agent only
// when its provider names it (Spec.PassEnv, written by the owner or built
// in), not on the agent's own word (Spec.AuthEnv, what its login methods
// advertise): what NeverPassed refuses, proxy variables, the daemon's
// store (PG*, DATABASE_URL), cloud credentials (AWS_*, AZURE_*,
// GOOGLE_APPLICATION_CREDENTIALS, ...) and forge and registry tokens
// (GITHUB_TOKEN, GH_TOKEN, NPM_TOKEN, ...).
func OwnerOnlyEnv(name string) bool {
	return NeverPassed(name) || ProxyEnv(name) || MatchEnv(ownerOnly(), name)
}

// ProxyEnv reports whether name is a proxy variable (HTTP_PROXY,
// https_proxy, ALL_PROXY, NO_PROXY, ...). A provider's own are not passed
// to its agents: the daemon runs the agents' egress and uses its own
// proxy settings upstream.
func ProxyEnv(name string) bool {
	up := strings.ToUpper(name)
	return strings.HasSuffix(up, "_PROXY") || up == "NO_PROXY"
}

// MatchEnv reports whether one of patterns names name: a pattern is a
// name, or a prefix ending in "*".
func MatchEnv(patterns []string, name string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}

// ValidEnvName reports whether name is a portable environment variable
// name: a letter or '_', then letters, digits and '_'.
func ValidEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		letter := c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// CheckPassEnv returns why p cannot be an entry of a provider's pass-
// through list (Spec.PassEnv), or "": a variable name, or a prefix of
// one ending in "*" ("AIDER_*"); never the daemon's own AGENTPOOL_*
// variables or a socket of the user's session.
func CheckPassEnv(p string) string {
	name, prefix := strings.CutSuffix(p, "*")
	switch {
	case p == "*" || p == "":
		return `want a variable name or a prefix ending in "*" ("AIDER_*"); passing every variable would pass the daemon's secrets`
	case !ValidEnvName(name):
		return fmt.Sprintf("invalid variable name %q (want letters, digits and '_', not starting with a digit; a trailing \"*\" makes a prefix)", p)
	case strings.HasPrefix(name, daemonPrefix):
		return fmt.Sprintf("%s is one of the daemon's own AGENTPOOL_* variables (its token among them), which no agent gets", p)
	case !prefix && NeverPassed(name):
		return fmt.Sprintf("%s names a socket or file of your desktop session, which is not in an agent's world", p)
	}
	return ""
}

// AgentEnv returns the environment of an agent launched with spec, never
// nil: PassedEnv(spec), then spec.Env less its proxy variables, then extra
// ("KEY=value"), later entries of a name winning.
func AgentEnv(spec Spec, extra ...string) []string {
	return agentEnv(os.Environ(), spec, extra)
}

// PassedEnv returns the variables of the daemon's environment an agent
// launched with spec gets (never nil, so that exec never takes it for
// "the daemon's whole environment"): those BaseEnv and spec.PassEnv name, and those
// of spec.AuthEnv that are not OwnerOnlyEnv; never a NeverPassed one nor,
// but for BaseEnv's, a proxy variable. The terminals the bridge runs for
// the agent start from it too.
func PassedEnv(spec Spec) []string {
	return passedEnv(os.Environ(), spec)
}

func agentEnv(environ []string, spec Spec, extra []string) []string {
	env := passedEnv(environ, spec)
	for _, kv := range spec.Env {
		if name, _, _ := strings.Cut(kv, "="); !ProxyEnv(name) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func passedEnv(environ []string, spec Spec) []string {
	base := BaseEnv()
	// Never nil: exec gives a nil Env the daemon's whole environment.
	env := make([]string, 0, 32)
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || NeverPassed(name):
		case MatchEnv(base, name),
			MatchEnv(spec.PassEnv, name) && !ProxyEnv(name),
			slices.Contains(spec.AuthEnv, name) && !OwnerOnlyEnv(name):
			env = append(env, kv)
		}
	}
	return env
}

// TrustedEnv returns the environment of a program the owner configured
// (a notify command): the daemon's, less its own secrets — its
// AGENTPOOL_* variables and PostgreSQL's PG* ones, which may carry the
// password of its store.
func TrustedEnv() []string {
	environ := os.Environ()
	env := make([]string, 0, len(environ))
	for _, kv := range environ {
		if !strings.HasPrefix(kv, daemonPrefix) && !strings.HasPrefix(kv, storePrefix) {
			env = append(env, kv)
		}
	}
	return env
}

// EnvPath is a path a variable of an agent's environment names, which the
// agent must reach to work: a credentials file, a CA bundle, a state
// directory moved by a variable.
type EnvPath struct {
	// Name is the variable.
	Name string
	// Path is absolute and clean.
	Path string
	// Write is set for a directory the agent writes; otherwise it reads.
	Write bool
}

// envPathOf says whether the variable name names a path an agent must
// reach, whether it writes there, and what to join to the value.
func envPathOf(name string) (write bool, sub string, ok bool) {
	switch name {
	case "GOOGLE_APPLICATION_CREDENTIALS", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
		"REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "CODEX_CA_CERTIFICATE", "OPENCODE_CONFIG", "OPENCODE_CONFIG_DIR":
		return false, "", true
	case "CLAUDE_CONFIG_DIR", "CODEX_HOME", "CODEX_SQLITE_HOME":
		return true, "", true
	case "GEMINI_CLI_HOME":
		return true, ".gemini", true
	}
	return false, "", false
}

// EnvPaths returns the paths the variables of env (an agent's
// environment, the last entry of a name winning) name that the agent must
// reach: GOOGLE_APPLICATION_CREDENTIALS and the CA bundles to read;
// CLAUDE_CONFIG_DIR, CODEX_HOME and the like to write. Relative values
// are left out. The launch adds them to the agent's sandbox grants, where
// the sandbox's own rules still refuse a secret.
func EnvPaths(env []string) []EnvPath {
	last := map[string]string{}
	var names []string
	for _, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		if _, _, ok := envPathOf(name); !ok {
			continue
		}
		if _, seen := last[name]; !seen {
			names = append(names, name)
		}
		last[name] = val
	}
	var out []EnvPath
	for _, name := range names {
		write, sub, _ := envPathOf(name)
		if v := last[name]; filepath.IsAbs(v) {
			out = append(out, EnvPath{Name: name, Path: filepath.Join(v, sub), Write: write})
		}
	}
	return out
}
