package httpapi

import (
	"context"
	"net/http"

	"github.com/agentpool/agentpool/mcpshare"
)

// MCPShares lists the daemon's shared MCP servers; *mcpshare.Manager
// satisfies it.
type MCPShares interface {
	Stats() []mcpshare.Stat
}

// listMCPShares: GET /v1/mcp/shared → 200 with each shared MCP server the
// daemon knows: the names agents know it by, its command (never its
// environment), whether it runs, its clients, calls, errors, starts and
// resident memory.
func (s *Server) listMCPShares(w http.ResponseWriter, _ *http.Request) error {
	list := []mcpshare.Stat{}
	if s.cfg.MCPShares != nil {
		list = append(list, s.cfg.MCPShares.Stats()...)
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// collectMCPShares adds one series per shared MCP server and number.
func (s *Server) collectMCPShares(e *exposition) {
	if s.cfg.MCPShares == nil {
		return
	}
	const ns = metricsNamespace + "mcp_shared_"
	var clients, calls, errs, starts, rss, running []series
	for _, st := range s.cfg.MCPShares.Stats() {
		name := ""
		if len(st.Names) > 0 {
			name = st.Names[0]
		}
		l := []label{{"id", st.ID}, {"name", name}}
		up := 0.0
		if st.Running {
			up = 1
		}
		clients = append(clients, series{labels: l, value: float64(st.Clients)})
		calls = append(calls, series{labels: l, value: float64(st.Calls)})
		errs = append(errs, series{labels: l, value: float64(st.Errors)})
		starts = append(starts, series{labels: l, value: float64(st.Starts)})
		rss = append(rss, series{labels: l, value: float64(st.RSS)})
		running = append(running, series{labels: l, value: up})
	}
	e.add(ns+"clients", "Agents given a shared MCP server now.", typeGauge, clients...)
	e.add(ns+"calls_total", "Calls proxied to a shared MCP server.", typeCounter, calls...)
	e.add(ns+"errors_total", "Calls to a shared MCP server that failed.", typeCounter, errs...)
	e.add(ns+"starts_total", "Starts of a shared MCP server's process.", typeCounter, starts...)
	e.add(ns+"resident_memory_bytes", "Resident memory of a shared MCP server's processes.", typeGauge, rss...)
	e.add(ns+"running", "Whether a shared MCP server's process runs now.", typeGauge, running...)
}

// MCPShares lists the daemon's shared MCP servers (GET /v1/mcp/shared).
func (c *Client) MCPShares(ctx context.Context) ([]mcpshare.Stat, error) {
	var l []mcpshare.Stat
	return l, c.call(ctx, http.MethodGet, "/v1/mcp/shared", nil, &l)
}
