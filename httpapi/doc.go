// Package httpapi is agentpool's HTTP API: the v1 JSON endpoints over the
// pool and the provider registry, server-sent event streams of a session's
// events (resumable with Last-Event-ID) and of the whole daemon, bearer
// authentication (the token, or a web page's revocable credential redeemed
// from a one-time login link; never a cookie) with a Host check against DNS
// rebinding, Prometheus metrics, and a Go Client for all of it.
//
// Handlers return errors; one function (errorFor) maps them to a status and
// an error code, and only internal (5xx) errors are logged. Every error body
// has the shape {"error": {"code": "...", "message": "..."}}.
package httpapi
