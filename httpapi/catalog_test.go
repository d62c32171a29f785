package httpapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/registry/catalog"
)

// oneAgent is a registry document of one npx agent.
const oneAgent = `{"version": "1.0.0", "agents": [{"id": "tiny", "name": "Tiny", "version": "1.0.0",
  "description": "d", "distribution": {"npx": {"package": "@t/tiny", "args": ["--acp"]}}}], "extensions": []}`

func TestCatalogAPI(t *testing.T) {
	file := filepath.Join(t.TempDir(), "catalog.json")
	store := catalog.Open(catalog.Config{Path: file, Platform: "linux-x86_64", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	env := newTestEnv(t, &fakePool{}, func(c *Config) { c.Catalog = store })
	ctx := context.Background()

	v, err := env.client.Catalog(ctx)
	if err != nil {
		t.Fatalf("Catalog() error = %v", err)
	}
	if v.Source != catalog.SourceBuiltin || v.Platform != "linux-x86_64" || len(v.Agents) < 12 {
		t.Fatalf("Catalog() = %s on %s with %d agents; want the built-in snapshot", v.Source, v.Platform, len(v.Agents))
	}

	v, err = env.client.PutCatalog(ctx, []byte(oneAgent))
	if err != nil {
		t.Fatalf("PutCatalog() error = %v", err)
	}
	if len(v.Agents) != 1 || strings.Join(v.Agents[0].Command, " ") != "npx -y @t/tiny@1.0.0 --acp" || v.File != file {
		t.Fatalf("PutCatalog() = %+v; want tiny's npx command, stored in %s", v, file)
	}

	// A bad document: 422 naming the field, the catalog unchanged.
	_, err = env.client.PutCatalog(ctx, []byte(`{"version": "1.0.0", "agents": [{"id": "Tiny!", "name": "T", "version": "1.0.0", "description": "d", "distribution": {"npx": {"package": "p"}}}]}`))
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusUnprocessableEntity || len(ae.Diagnostics) != 1 || ae.Diagnostics[0].Path != "agents[0].id" {
		t.Fatalf("PutCatalog(bad id) error = %v; want 422 with a diagnostic at agents[0].id", err)
	}
	if v, _ := env.client.Catalog(ctx); len(v.Agents) != 1 || v.Agents[0].ID != "tiny" {
		t.Errorf("after a refused PUT, Catalog() = %+v; want tiny still", v.Agents)
	}
	if data, _ := os.ReadFile(file); string(data) != oneAgent {
		t.Errorf("a refused PUT changed %s", file)
	}

	env.check(t, []apiCall{
		{name: "wrong token", method: "GET", path: "/v1/catalog", header: map[string]string{"Authorization": "Bearer nope"}, status: http.StatusUnauthorized},
		{name: "empty body", method: "PUT", path: "/v1/catalog", body: " ", status: http.StatusBadRequest, code: CodeBadRequest},
		{name: "not JSON", method: "PUT", path: "/v1/catalog", body: "{", status: http.StatusUnprocessableEntity, code: CodeInvalidConfig},
		{name: "wrong type", method: "PUT", path: "/v1/catalog", body: oneAgent, header: map[string]string{"Content-Type": "text/plain"}, status: http.StatusUnsupportedMediaType},
	})
}

func TestCatalogAPIAbsent(t *testing.T) {
	env := newTestEnv(t, &fakePool{}, nil)
	_, err := env.client.Catalog(context.Background())
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusNotImplemented {
		t.Fatalf("Catalog() without a catalog: error = %v; want 501", err)
	}
}
