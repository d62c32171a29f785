package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/agentpool/agentpool/registry/catalog"
)

// Catalog returns GET /v1/catalog: the agents that can be added as
// providers.
func (c *Client) Catalog(ctx context.Context) (catalog.View, error) {
	var v catalog.View
	return v, c.call(ctx, http.MethodGet, "/v1/catalog", nil, &v)
}

// PutCatalog replaces the daemon's catalog with a registry document; an
// invalid one is an *Error with a diagnostic per field.
func (c *Client) PutCatalog(ctx context.Context, doc []byte) (catalog.View, error) {
	var v catalog.View
	return v, c.call(ctx, http.MethodPut, "/v1/catalog", json.RawMessage(doc), &v)
}
