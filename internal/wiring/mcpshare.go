package wiring

import (
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/mcpshare"
	"github.com/agentpool/agentpool/pool"
)

// EnvMCPToken is the variable the stdio relay (agentpool mcp-relay) reads
// its credential from: an argument would show in every ps listing.
const EnvMCPToken = "AGENTPOOL_MCP_TOKEN"

// RelaySubcommand is the agentpool command an agent that takes stdio MCP
// servers only runs to reach a shared server.
const RelaySubcommand = "mcp-relay"

// mcpPlan decides, for each stdio server of a launch, whether its agent
// gets the daemon's shared copy or starts its own, and attaches the agent
// to the shared ones. It returns nil when the launch has no stdio server
// or the daemon shares none; the lease (nil when nothing is shared) must
// be released when the agent has ended.
func (l Launcher) mcpPlan(req pool.LaunchRequest, servers backends.MCPServers) (*backends.MCPPlan, *mcpshare.Lease, error) {
	if l.MCP == nil || req.Spec.Kind != backends.KindACP {
		return nil, nil, nil
	}
	plan := &backends.MCPPlan{}
	shared := backends.MCPServers{}
	for _, name := range servers.Names() {
		s := servers[name]
		if s.Transport() != backends.MCPStdio {
			continue
		}
		if why := s.Unshared(req.Spec.Dir); why != "" {
			plan.Sharing = append(plan.Sharing, backends.MCPSharing{Name: name, Reason: why})
			continue
		}
		if l.RelayCommand == "" {
			plan.Sharing = append(plan.Sharing, backends.MCPSharing{Name: name, Reason: "the daemon has no relay program"})
			continue
		}
		shared[name] = s
		plan.Sharing = append(plan.Sharing, backends.MCPSharing{Name: name, Shared: true})
	}
	if len(plan.Sharing) == 0 {
		return nil, nil, nil
	}
	if len(shared) == 0 {
		plan.HTTP, plan.Stdio = servers.Clone(), servers.Clone()
		return plan, nil, nil
	}
	lease, err := l.MCP.Attach(req.Session, req.Spec.Provider, shared)
	if err != nil {
		return nil, nil, fmt.Errorf("shared MCP servers: %w", err)
	}
	plan.HTTP, plan.Stdio = servers.Clone(), servers.Clone()
	for name := range shared {
		url := lease.URL(name)
		plan.HTTP[name] = backends.MCPServer{Type: backends.MCPHTTP, URL: url,
			Headers: map[string]string{"Authorization": "Bearer " + lease.Token()}}
		plan.Stdio[name] = backends.MCPServer{Command: l.RelayCommand, Args: []string{RelaySubcommand, url},
			Env: map[string]string{EnvMCPToken: lease.Token()}}
	}
	return plan, lease, nil
}

// withShare returns the sandbox of a launch whose agent reaches the
// shared MCP servers at addr ("127.0.0.1:port"): the relay program is
// readable, and in its own network namespace the address answers on the
// same port of its loopback, relayed by the egress proxy, whatever the
// provider's network (with "none", that address is all it reaches).
func withShare(sb backends.SandboxSpec, addr, relay string) backends.SandboxSpec {
	sb = sb.Clone()
	if relay != "" && sb.Enabled && !slices.Contains(sb.Read, relay) {
		sb.Read = append(sb.Read, relay)
	}
	if sb.Network == backends.NetworkNone {
		sb.Network, sb.Ports, sb.Hosts = backends.NetworkList, nil, nil
	}
	if !slices.Contains(sb.Hosts, addr) {
		sb.Hosts = append(sb.Hosts, addr)
	}
	return sb
}

// allowSharePort lets a launch confined by Landlock alone (no network
// namespace of its own, as where the sandbox cannot make them and drops
// the view) connect to the shared servers' port. In its own namespaces
// Landlock sets no network rule and the port is unused.
func allowSharePort(pol *sandbox.Policy, addr string) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || pol == nil {
		return
	}
	switch pol.Network {
	case backends.NetworkNone:
		pol.Network, pol.Ports = backends.NetworkList, []uint16{ap.Port()}
	case backends.NetworkList:
		if !slices.Contains(pol.Ports, ap.Port()) {
			pol.Ports = append(pol.Ports, ap.Port())
		}
	}
}

// leaseJail is an agent's jail (nil: none) that also releases the agent's
// shared MCP servers when the jail is released, once the agent has ended.
type leaseJail struct {
	jail    backends.Jail
	release func()
	once    *sync.Once
}

func newLeaseJail(j backends.Jail, lease *mcpshare.Lease) backends.Jail {
	return leaseJail{jail: j, release: lease.Release, once: &sync.Once{}}
}

func (j leaseJail) Prepare(cmd *exec.Cmd) error {
	if j.jail == nil {
		return nil
	}
	return j.jail.Prepare(cmd)
}

// TakePrestart passes on the jail's launcher started early, if any.
func (j leaseJail) TakePrestart(cmd *exec.Cmd) (backends.Prestart, bool) {
	if pj, ok := j.jail.(backends.PrestartJail); ok {
		return pj.TakePrestart(cmd)
	}
	return backends.Prestart{}, false
}

func (j leaseJail) Kill() error {
	if j.jail == nil {
		return nil
	}
	return j.jail.Kill()
}

func (j leaseJail) Release() error {
	j.once.Do(j.release)
	if j.jail == nil {
		return nil
	}
	return j.jail.Release()
}

func (j leaseJail) Describe() backends.Confinement {
	if j.jail == nil {
		return backends.Confinement{}
	}
	return j.jail.Describe()
}

// RelayCommand returns the absolute path of the running agentpool binary,
// for Launcher.RelayCommand, "" when it cannot be known.
func RelayCommand(exe string) string {
	if exe == "" || !filepath.IsAbs(exe) || strings.Contains(exe, " (deleted)") {
		return ""
	}
	return exe
}
