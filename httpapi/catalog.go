package httpapi

import (
	"bytes"
	"errors"
	"net/http"

	"github.com/agentpool/agentpool/registry/catalog"
)

// Catalog is what the catalog endpoints need; *catalog.Store satisfies
// it. Put checks the document and stores it; an invalid one returns an
// error matching catalog.ErrInvalid and changes nothing.
type Catalog interface {
	View() catalog.View
	Put(doc []byte) (catalog.View, error)
}

var _ Catalog = (*catalog.Store)(nil)

// errNoCatalog answers the catalog endpoints of a server without one.
var errNoCatalog = &Error{Status: http.StatusNotImplemented, Code: CodeUnsupported, Message: "this daemon has no agent catalog"}

// catalogRoutes registers the catalog's endpoints.
func (s *Server) catalogRoutes() {
	s.route("GET /v1/catalog", s.getCatalog, false)
	s.route("PUT /v1/catalog", s.putCatalog, false)
}

// getCatalog: GET /v1/catalog → the catalog's agents for this platform,
// with the command and install step of each.
func (s *Server) getCatalog(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Catalog == nil {
		return errNoCatalog
	}
	writeJSON(w, http.StatusOK, s.cfg.Catalog.View())
	return nil
}

// putCatalog: PUT /v1/catalog with a registry document (registry.json's
// format) replaces the catalog. The daemon fetches nothing itself: the
// client reads the file or URL and sends the document. An invalid
// document is 422 with a diagnostic per field; the catalog stays.
func (s *Server) putCatalog(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Catalog == nil {
		return errNoCatalog
	}
	if err := checkJSONType(r); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "request body is empty; want a registry document (registry.json)")
	}
	v, err := s.cfg.Catalog.Put(body)
	if errors.Is(err, catalog.ErrInvalid) {
		e := &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalidConfig, Message: "the catalog document is refused; the catalog is unchanged: " + err.Error()}
		for _, fe := range catalog.FieldErrors(err) {
			e.Diagnostics = append(e.Diagnostics, Diagnostic{Path: fe.Path, Message: fe.Msg})
		}
		return e
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}
