package sandbox_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// TestPolicyForEnvPaths: the files and directories the agent's environment
// names are granted (a credentials file to read, a state directory to
// write), as files or directories of their own; one that would expose a
// secret is refused, with a note naming the variable.
func TestPolicyForEnvPaths(t *testing.T) {
	home := "/home/u"
	env := []string{
		"GOOGLE_APPLICATION_CREDENTIALS=/srv/keys/vertex.json",
		"CODEX_HOME=/data/codex",
		"NODE_EXTRA_CA_CERTS=" + home + "/.config/gcloud/ca.pem",
		"SSL_CERT_FILE=relative.pem",
	}
	paths := backends.EnvPaths(env)
	r := sandbox.PolicyFor(sandbox.PolicyInput{Sandbox: backends.SandboxSpec{Enabled: true}, Home: home,
		Worktree: "/w/s1", Env: paths})
	if !slices.Contains(r.Policy.Read, "/srv/keys/vertex.json") || slices.Contains(r.Policy.Read, "/srv/keys") {
		t.Errorf("Read = %q; want the credentials file, and only it", r.Policy.Read)
	}
	if !slices.Contains(r.Policy.Write, "/data/codex") {
		t.Errorf("Write = %q; want CODEX_HOME", r.Policy.Write)
	}
	ca := home + "/.config/gcloud/ca.pem"
	if slices.Contains(r.Policy.Read, ca) {
		t.Errorf("Read = %q; want %s refused: it lies inside a secret", r.Policy.Read, ca)
	}
	if len(r.Notes) != 1 {
		t.Fatalf("Notes = %+v; want one, for %s", r.Notes, ca)
	}
	if n := r.Notes[0]; n.Path != ca || n.Entry != backends.EntryEnv || !strings.HasPrefix(n.Reason, "NODE_EXTRA_CA_CERTS names it") ||
		!strings.Contains(n.Reason, "secret") {
		t.Errorf("note = %+v; want %s refused, its variable and the secret named", n, ca)
	}
}
