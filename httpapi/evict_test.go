package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/pool"
)

// evictingPool is the fake pool with an Evict.
type evictingPool struct {
	*fakePool
	evict func(ctx context.Context, session, agent string) error
}

func (p evictingPool) Evict(ctx context.Context, session, agent string) error {
	return p.evict(ctx, session, agent)
}

func TestEvictEndpoint(t *testing.T) {
	var got []string
	fp := &fakePool{}
	ep := evictingPool{fakePool: fp, evict: func(_ context.Context, session, agent string) error {
		got = append(got, session+"/"+agent)
		switch session {
		case "busy":
			return fmt.Errorf("agent %q of session %q is running a turn: %w", agent, session, pool.ErrBusy)
		case "missing":
			return fmt.Errorf("no warm agent %q in session %q: %w", agent, session, pool.ErrNotFound)
		case "closing":
			return fmt.Errorf("pool: %w", pool.ErrClosed)
		}
		return nil
	}}
	env := newTestEnv(t, fp, func(c *Config) { c.Pool = ep })
	ctx := context.Background()

	if err := env.client.Evict(ctx, "s1", "claude code"); err != nil || len(got) != 1 || got[0] != "s1/claude code" {
		t.Errorf("Evict(s1, claude code) = %v (pool got %q); want nil and the ids passed unescaped", err, got)
	}
	tests := []struct {
		session  string
		status   int
		code     string
		contains string
	}{
		{"busy", http.StatusConflict, CodeBusy, "running a turn"},
		{"missing", http.StatusNotFound, CodeNotFound, "no warm agent"},
		{"closing", http.StatusConflict, CodeClosed, "pool"},
	}
	for _, tt := range tests {
		err := env.client.Evict(ctx, tt.session, "demo")
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != tt.status || ae.Code != tt.code || !strings.Contains(ae.Message, tt.contains) {
			t.Errorf("Evict(%q) error = %v; want %d %s naming %q", tt.session, err, tt.status, tt.code, tt.contains)
		}
	}

	// Without the token, nothing is evicted.
	n := len(got)
	req, _ := http.NewRequest(http.MethodDelete, env.ts.URL+"/v1/pool/s1/demo", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(got) != n {
		t.Errorf("DELETE /v1/pool/s1/demo without a token = %d (pool called %d times); want 401 and no call", resp.StatusCode, len(got)-n)
	}

	// A pool that cannot evict answers 501.
	plain := newTestEnv(t, &fakePool{}, nil)
	err = plain.client.Evict(ctx, "s1", "demo")
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusNotImplemented || ae.Code != CodeNotImplemented {
		t.Errorf("Evict() on a pool without Evict error = %v; want 501", err)
	}
}
