package mcpshare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Relay copies MCP messages between a stdio client (it reads in and
// writes out) and the shared server at url, sending token as the bearer
// credential, until in ends (nil), ctx is done, or either side fails. It
// is what an agent that takes stdio servers only runs: agentpool
// mcp-relay. It never uses a proxy: url is on the agent's loopback.
func Relay(ctx context.Context, url, token string, in io.Reader, out io.Writer) error {
	hc := &http.Client{Transport: bearer{token: token, base: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4,
		IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: 0}}}
	remote, err := (&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}).Connect(ctx)
	if err != nil {
		return fmt.Errorf("mcp-relay: connect %s: %w", url, err)
	}
	local, err := (&mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}}).Connect(ctx)
	if err != nil {
		_ = remote.Close()
		return fmt.Errorf("mcp-relay: stdio: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	pump := func(from, to mcp.Connection, side string) {
		for {
			msg, err := from.Read(ctx)
			if err != nil {
				errc <- fmt.Errorf("%s: %w", side, err)
				return
			}
			if err := to.Write(ctx, msg); err != nil {
				errc <- fmt.Errorf("%s: %w", side, err)
				return
			}
		}
	}
	go pump(local, remote, "to the daemon")
	go pump(remote, local, "from the daemon")
	err = <-errc
	cancel()
	_ = remote.Close()
	_ = local.Close()
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("mcp-relay: %w", err)
}

// bearer adds the credential to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
