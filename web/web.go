// Package web is agentpool's page: one HTML file, a style sheet and plain
// ES modules (no build step), plus the vendored terminal library, embedded
// in the binary. It only holds the files; httpapi serves them, and the
// page talks to the daemon through the same HTTP API as every client.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// Index is the page's entry file within Assets.
const Index = "index.html"

// Login is the login page within Assets: its script redeems the one-time
// code of a login link (/login#code=...) for the page's credential.
const Login = "login.html"

// Assets returns the page's files: index.html at the root, app.css, js/
// and vendor/ (each vendored library beside its licence).
func Assets() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // "static" is a constant, valid directory name
	}
	return sub
}
