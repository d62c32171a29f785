package registry

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/agentpool/agentpool/backends"
)

// authEnvOf returns the variables the env_var login methods of rec's agent
// name, sorted: those its agents get (Spec.AuthEnv), and those only the
// provider's owner may pass (backends.OwnerOnlyEnv) or that are no
// variable names. The agent's word is enough for its own API key, never
// for the daemon's store, a cloud credential or a forge token.
func authEnvOf(rec *probeRecord) (pass, refused []string) {
	if rec == nil || rec.info == nil {
		return nil, nil
	}
	for _, m := range rec.info.Auth {
		if m.Type != backends.AuthEnvVar {
			continue
		}
		for _, v := range m.Vars {
			switch {
			case !backends.ValidEnvName(v) || backends.OwnerOnlyEnv(v):
				if !slices.Contains(refused, v) {
					refused = append(refused, v)
				}
			case !slices.Contains(pass, v):
				pass = append(pass, v)
			}
		}
	}
	slices.Sort(pass)
	slices.Sort(refused)
	return pass, refused
}

// missingAuthEnv returns the variables of info's env_var login methods
// that an agent launched with spec did not get although the daemon's
// environment has them: a probe that failed for want of a login is worth
// making again with them.
func missingAuthEnv(info ProbeInfo, spec backends.Spec) []string {
	pass, _ := authEnvOf(&probeRecord{info: &info})
	var out []string
	for _, v := range pass {
		if slices.Contains(spec.AuthEnv, v) || backends.MatchEnv(spec.PassEnv, v) || backends.MatchEnv(backends.BaseEnv(), v) {
			continue
		}
		if _, ok := os.LookupEnv(v); ok {
			out = append(out, v)
		}
	}
	return out
}

// envNotes says what of d's environment its agents do not get: the proxy
// variables of its "env" and "pass_env" (the daemon runs the agents'
// egress), and the variables its agent's login methods name that only
// the owner may pass (refused, from authEnvOf).
func envNotes(d *definition, refused []string) []string {
	var notes []string
	for _, k := range slices.Sorted(maps.Keys(d.env)) {
		if backends.ProxyEnv(k) {
			notes = append(notes, fmt.Sprintf("env %s is not passed to the agent: the daemon runs its agents' network egress, through its own proxy settings", k))
		}
	}
	for _, p := range d.passEnv {
		if backends.ProxyEnv(strings.TrimSuffix(p, "*")) {
			notes = append(notes, fmt.Sprintf("pass_env %s is not passed to the agent: the daemon runs its agents' network egress, through its own proxy settings", p))
		}
	}
	for _, v := range refused {
		switch {
		case !backends.ValidEnvName(v):
			notes = append(notes, fmt.Sprintf("the agent's login methods name %q, which is no variable name: ignored", v))
		case backends.NeverPassed(v):
			notes = append(notes, fmt.Sprintf("the agent's login methods name %s, which no agent gets", v))
		case backends.ProxyEnv(v):
			notes = append(notes, fmt.Sprintf("the agent's login methods name %s, which is not passed to the agent: the daemon runs its agents' network egress", v))
		case backends.MatchEnv(d.passEnv, v):
			// The owner passes it.
		default:
			notes = append(notes, fmt.Sprintf("the agent's login methods name %s, which it gets only if the provider's \"pass_env\" names it (the daemon's store, cloud credentials and forge tokens are never passed on an agent's word)", v))
		}
	}
	return notes
}
