package httpapi

import (
	"context"
	"strings"
	"testing"
)

// TestProvidersConfinement: GET /v1/providers and POST
// /v1/providers/refresh carry the machine's confinement beside the
// snapshot, so that a client shows what a provider's sandbox can enforce
// here; a server given none leaves it out.
func TestProvidersConfinement(t *testing.T) {
	type status struct {
		Containment     string   `json:"containment"`
		Landlock        int      `json:"landlock"`
		Namespaces      bool     `json:"namespaces"`
		NamespacesError string   `json:"namespaces_error,omitempty"`
		Warnings        []string `json:"warnings,omitempty"`
	}
	st := status{Containment: "cgroup", Landlock: 6, NamespacesError: "user namespaces are not allowed", Warnings: []string{"Landlock only: agents can reach unix sockets and local services"}}
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, func(c *Config) { c.Confinement = st })
	const want = `"confinement":{"containment":"cgroup","landlock":6,"namespaces":false,"namespaces_error":"user namespaces are not allowed"`
	e.check(t, []apiCall{
		{name: "list", method: "GET", path: "/v1/providers", status: 200, want: want},
		{name: "refresh", method: "POST", path: "/v1/providers/refresh", status: 200, want: want},
	})
	l, err := e.client.ProviderList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c, ok := l.Confinement.(map[string]any)
	if !ok || c["namespaces"] != false || c["namespaces_error"] != st.NamespacesError || len(l.Providers) == 0 || l.ETag == "" {
		t.Errorf("ProviderList() = confinement %#v, %d providers, ETag %q; want the status given and the snapshot", l.Confinement, len(l.Providers), l.ETag)
	}

	bare := newTestEnv(t, fp, nil)
	if _, _, body := bare.send(t, apiCall{method: "GET", path: "/v1/providers"}); strings.Contains(body, `"confinement"`) {
		t.Errorf("GET /v1/providers without a confinement = %.200s…; want no confinement field", body)
	}
}
