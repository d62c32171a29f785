package httpapi

import "context"

// Call sends a request to path (with its query) with body as JSON (nil for
// none) and decodes a 2xx answer into out (nil to discard it). It serves
// endpoints the Client has no method for; a refusal is an *Error carrying
// the API's code and message, as for every other method.
func (c *Client) Call(ctx context.Context, method, path string, body, out any) error {
	return c.call(ctx, method, path, body, out)
}
