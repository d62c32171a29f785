package httpapi

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/agentpool/agentpool/web"
)

// pageCSP is the Content-Security-Policy of the page: its own scripts,
// styles and connections only, no inline script, no frames. Agent output
// is rendered as text; this is the second line of defence. Inline styles
// are allowed for the terminal library, whose renderer writes <style>
// elements; scripts stay strict.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; " +
	"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// webAsset is one embedded file, ready to serve.
type webAsset struct {
	body, gz    []byte // gz is nil when compressing does not pay
	etag, ctype string
}

// webRoutes registers the page: / (index.html), /login (login.html, which
// redeems the code in its fragment) and /assets/{path}. They are public:
// the page holds no secret, and it asks the API, which needs a page
// credential or the token.
func (s *Server) webRoutes() {
	assets, err := loadAssets(web.Assets())
	if err != nil {
		// The files are embedded at build time: a failure is a build bug.
		panic(fmt.Sprintf("httpapi: load the page's assets: %v", err))
	}
	index, login := assets[web.Index], assets[web.Login]
	s.route("GET /{$}", func(w http.ResponseWriter, r *http.Request) error {
		serveAsset(w, r, index)
		return nil
	}, true)
	s.route("GET /login", func(w http.ResponseWriter, r *http.Request) error {
		serveAsset(w, r, login)
		return nil
	}, true)
	s.route("GET /assets/{path...}", func(w http.ResponseWriter, r *http.Request) error {
		a, ok := assets[r.PathValue("path")]
		if !ok {
			return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such file: " + r.URL.Path}
		}
		serveAsset(w, r, a)
		return nil
	}, true)
}

// loadAssets reads every file of fsys, with its ETag and, for text, a
// gzipped copy.
func loadAssets(fsys fs.FS) (map[string]*webAsset, error) {
	out := map[string]*webAsset{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		a := &webAsset{body: b, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: mime.TypeByExtension(path.Ext(p))}
		switch path.Ext(p) {
		case ".js", ".mjs":
			a.ctype = "text/javascript; charset=utf-8"
		case ".html":
			a.ctype = "text/html; charset=utf-8"
		case ".css":
			a.ctype = "text/css; charset=utf-8"
		case "", ".txt", ".md":
			a.ctype = "text/plain; charset=utf-8"
		}
		if a.ctype == "" {
			a.ctype = "application/octet-stream"
		}
		if strings.HasPrefix(a.ctype, "text/") || strings.Contains(a.ctype, "svg") || strings.Contains(a.ctype, "json") {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			_, _ = zw.Write(b)
			_ = zw.Close()
			if buf.Len() < len(b)*9/10 {
				a.gz = buf.Bytes()
			}
		}
		out[p] = a
		return nil
	})
	return out, err
}

// serveAsset answers with a, revalidated by ETag (no-cache: a new binary
// is seen at once), gzipped when the client accepts it.
func serveAsset(w http.ResponseWriter, r *http.Request, a *webAsset) {
	h := w.Header()
	h.Set("ETag", a.etag)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Vary", "Accept-Encoding")
	if strings.HasPrefix(a.ctype, "text/html") {
		h.Set("Content-Security-Policy", pageCSP)
		h.Set("X-Frame-Options", "DENY")
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && strings.Contains(inm, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", a.ctype)
	body := a.body
	if a.gz != nil && acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		body = a.gz
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// acceptsGzip says whether the request's Accept-Encoding lists gzip.
func acceptsGzip(r *http.Request) bool {
	for _, e := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(e), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// workerRemover is the answer to any request for a service worker's
// script. The page installs none; one registered on this origin was
// registered by a program that held the daemon's address while the daemon
// was down, to keep serving the page itself once the daemon is back. The
// browser asks for a registered worker's script again after a navigation
// (its update check), so the daemon answers with a worker that takes its
// place, unregisters, and reloads the page's windows from the daemon.
const workerRemover = `// agentpool installs no service worker: this one replaces one that another
// program registered while it held the daemon's address, and removes itself.
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', e => e.waitUntil((async () => {
  await self.registration.unregister();
  for (const c of await self.clients.matchAll({ type: 'window' })) c.navigate(c.url);
})()));
self.addEventListener('fetch', () => {}); // the network, never a cache
`

// serveWorkerRemover answers a service worker's script request (the
// browser marks it "Service-Worker: script") with workerRemover, and has
// the browser drop what it cached of the origin: files an impostor served
// with a long lifetime would otherwise still be used instead of the
// daemon's.
func serveWorkerRemover(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/javascript; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Clear-Site-Data", `"cache"`)
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = io.WriteString(w, workerRemover)
}
