package mcpshare

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"

	"github.com/agentpool/agentpool/backends"
)

// ID names a server definition: the same command, arguments, environment
// and sandbox give the same id, and so the same running server. It is a
// digest: it shows nothing of the environment's secrets.
func ID(def backends.MCPServer) string {
	env := make([][2]string, 0, len(def.Env))
	for _, k := range slices.Sorted(maps.Keys(def.Env)) {
		env = append(env, [2]string{k, def.Env[k]})
	}
	raw, _ := json.Marshal(struct {
		Command string
		Args    []string
		Env     [][2]string
		Sandbox *backends.SandboxSpec
	}{def.Command, def.Args, env, def.Sandbox})
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}
