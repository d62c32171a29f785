package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/agentpool/agentpool/pool"
)

// Trust is what the trust endpoints need: which repositories' setup files
// (.agentpool.json) the user trusted, by the hash of their content.
// Errors wrap pool.ErrInvalid (not a repository, an invalid file),
// pool.ErrNotFound (no setup file) or pool.ErrConflict (the file changed
// since the caller read it).
type Trust interface {
	// SetupFile reads repo's setup file as it is now.
	SetupFile(ctx context.Context, repo string) (SetupFile, error)
	// Trust records that the user trusts repo's setup file, when its
	// content still has the hex SHA-256 sum.
	Trust(ctx context.Context, repo, sum string) (TrustResult, error)
	// Revoke forgets the trust of repo's setup file, reporting whether
	// there was one.
	Revoke(ctx context.Context, repo string) (bool, error)
	// List returns the trusted setup files.
	List() ([]TrustEntry, error)
}

// SetupFile is a repository's setup file as the daemon read it: its
// content is the repository's own words.
type SetupFile struct {
	// Repo is the main checkout; File the setup file.
	Repo string `json:"repo"`
	File string `json:"file"`
	// SHA256 is the hex SHA-256 of Content.
	SHA256  string `json:"sha256"`
	Content string `json:"content"`
	// Copy, Command and Timeout are what it would do.
	Copy    []string `json:"copy,omitempty"`
	Command []string `json:"command,omitempty"`
	Timeout string   `json:"timeout,omitempty"`
	// Trusted says this content is trusted, since TrustedAt.
	Trusted   bool      `json:"trusted"`
	TrustedAt time.Time `json:"trusted_at,omitzero"`
	// TrustedSHA256 is the content trusted before, when it changed since.
	TrustedSHA256 string `json:"trusted_sha256,omitempty"`
	// Missing says the repository has no setup file (GET with
	// missing=ok only); the other fields but Repo are then empty.
	Missing bool `json:"missing,omitempty"`
}

// TrustResult answers POST /v1/trust: the file trusted, and the open
// sessions whose setup was skipped as untrusted and can now run it (POST
// /v1/sessions/{id}/setup).
type TrustResult struct {
	SetupFile
	Waiting []string `json:"waiting,omitempty"`
}

// TrustEntry is one trusted setup file.
type TrustEntry struct {
	Repo      string    `json:"repo"`
	SHA256    string    `json:"sha256"`
	TrustedAt time.Time `json:"trusted_at"`
}

// TrustRequest is the body of POST /v1/trust.
type TrustRequest struct {
	Repo   string `json:"repo"`
	SHA256 string `json:"sha256"`
}

// TrustList is the answer of GET /v1/trust without a repo.
type TrustList struct {
	Trusted []TrustEntry `json:"trusted"`
}

// SetupRunner is what POST /v1/sessions/{id}/setup needs of the pool;
// *pool.Pool satisfies it.
type SetupRunner interface {
	RunSetup(ctx context.Context, session string) error
}

var _ SetupRunner = (*pool.Pool)(nil)

// trustRoutes registers the trust endpoints.
func (s *Server) trustRoutes() {
	s.route("GET /v1/trust", s.getTrust, false)
	s.route("POST /v1/trust", s.postTrust, false)
	s.route("DELETE /v1/trust", s.deleteTrust, false)
	s.route("POST /v1/sessions/{id}/setup", s.runSetup, false)
}

// trust returns the configured Trust, or the 501 answer.
func (s *Server) trust() (Trust, error) {
	if s.cfg.Trust == nil {
		return nil, &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon keeps no trust of setup files"}
	}
	return s.cfg.Trust, nil
}

// trustConflict answers pool.ErrConflict with 409 conflict.
func trustConflict(err error) error {
	if errors.Is(err, pool.ErrConflict) {
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: err.Error()}
	}
	return err
}

// getTrust: GET /v1/trust → TrustList; GET /v1/trust?repo=PATH → the
// repository's SetupFile, 404 when it has none; with &missing=ok, a
// repository without one answers 200 with a SetupFile that says Missing
// (the page asks for every session, and having none is the usual case).
func (s *Server) getTrust(w http.ResponseWriter, r *http.Request) error {
	t, err := s.trust()
	if err != nil {
		return err
	}
	if repo := r.URL.Query().Get("repo"); repo != "" {
		sf, err := t.SetupFile(r.Context(), repo)
		if errors.Is(err, pool.ErrNotFound) && r.URL.Query().Get("missing") == "ok" {
			writeJSON(w, http.StatusOK, SetupFile{Repo: repo, Missing: true})
			return nil
		}
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, sf)
		return nil
	}
	list, err := t.List()
	if err != nil {
		return err
	}
	if list == nil {
		list = []TrustEntry{}
	}
	writeJSON(w, http.StatusOK, TrustList{Trusted: list})
	return nil
}

// postTrust: POST /v1/trust {repo, sha256} → 200 TrustResult; 409
// conflict when the file no longer has that hash.
func (s *Server) postTrust(w http.ResponseWriter, r *http.Request) error {
	t, err := s.trust()
	if err != nil {
		return err
	}
	var req TrustRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if req.Repo == "" {
		return badRequest("repo", "repo is required")
	}
	if len(req.SHA256) != 64 {
		return badRequest("sha256", "sha256 must be the 64 hex digits of the setup file's SHA-256, as GET /v1/trust?repo= gives it")
	}
	res, err := t.Trust(r.Context(), req.Repo, req.SHA256)
	if err != nil {
		return trustConflict(err)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// deleteTrust: DELETE /v1/trust?repo=PATH → 200 {"revoked": true}; 404
// when nothing was trusted for it.
func (s *Server) deleteTrust(w http.ResponseWriter, r *http.Request) error {
	t, err := s.trust()
	if err != nil {
		return err
	}
	repo := r.URL.Query().Get("repo")
	if repo == "" {
		return badRequest("repo", "repo is required")
	}
	found, err := t.Revoke(r.Context(), repo)
	if err != nil {
		return err
	}
	if !found {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no trusted setup file for " + repo}
	}
	writeJSON(w, http.StatusOK, map[string]bool{"revoked": true})
	return nil
}

// runSetup: POST /v1/sessions/{id}/setup → 202 {"started": true}: the
// repository's trusted setup runs now in the session's worktree; its
// steps follow on the session's stream. 409 while a turn runs (busy), or
// when the file is not trusted or a setup is pending (conflict).
func (s *Server) runSetup(w http.ResponseWriter, r *http.Request) error {
	sr, ok := s.pool.(SetupRunner)
	if !ok {
		return &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon cannot run setups on demand"}
	}
	if err := sr.RunSetup(r.Context(), r.PathValue("id")); err != nil {
		return trustConflict(err)
	}
	writeJSON(w, http.StatusAccepted, map[string]bool{"started": true})
	return nil
}

// SetupFile returns GET /v1/trust?repo=REPO.
func (c *Client) SetupFile(ctx context.Context, repo string) (SetupFile, error) {
	var sf SetupFile
	return sf, c.call(ctx, http.MethodGet, "/v1/trust?repo="+url.QueryEscape(repo), nil, &sf)
}

// Trust calls POST /v1/trust; a file changed since it was read is an
// *Error with CodeConflict.
func (c *Client) Trust(ctx context.Context, repo, sum string) (TrustResult, error) {
	var res TrustResult
	return res, c.call(ctx, http.MethodPost, "/v1/trust", TrustRequest{Repo: repo, SHA256: sum}, &res)
}

// TrustList returns GET /v1/trust.
func (c *Client) TrustList(ctx context.Context) ([]TrustEntry, error) {
	var l TrustList
	return l.Trusted, c.call(ctx, http.MethodGet, "/v1/trust", nil, &l)
}

// RevokeTrust calls DELETE /v1/trust?repo=REPO.
func (c *Client) RevokeTrust(ctx context.Context, repo string) error {
	return c.call(ctx, http.MethodDelete, "/v1/trust?repo="+url.QueryEscape(repo), nil, nil)
}

// RunSetup calls POST /v1/sessions/{id}/setup.
func (c *Client) RunSetup(ctx context.Context, session string) error {
	return c.call(ctx, http.MethodPost, sessionPath(session, "setup"), nil, nil)
}
