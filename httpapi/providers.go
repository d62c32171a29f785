package httpapi

import (
	"bytes"
	"errors"
	"net/http"
	"slices"

	"github.com/agentpool/agentpool/registry"
)

// mergePatchType is the media type of RFC 7396 JSON Merge Patch.
const mergePatchType = "application/merge-patch+json"

// PatchResult is the answer of PATCH /v1/providers/{id}.
type PatchResult struct {
	// ETag is the providers file's new ETag, for the next If-Match.
	ETag string `json:"etag"`
	// Provider is the provider's status after the patch; nil when the
	// patch removed a provider that is not built in.
	Provider *registry.ProviderStatus `json:"provider,omitempty"`
}

// ProviderList is the answer of GET /v1/providers and POST
// /v1/providers/refresh: the registry's snapshot, and how the kernel
// confines agents on this machine, which decides what a provider's
// sandbox can enforce.
type ProviderList struct {
	registry.Snapshot
	// Confinement is Config.Confinement, as GET /v1/health has it; absent
	// when the server was given none.
	Confinement any `json:"confinement,omitempty"`
}

// providers: GET /v1/providers → the snapshot, with its ETag.
func (s *Server) providers(w http.ResponseWriter, r *http.Request) error {
	s.writeProviders(w, r)
	return nil
}

// writeProviders answers the current snapshot, with its ETag and the
// machine's confinement.
func (s *Server) writeProviders(w http.ResponseWriter, r *http.Request) {
	snap := s.reg.Snapshot()
	if snap.ETag != "" {
		w.Header().Set("ETag", snap.ETag)
	}
	s.withHosts(r, &snap)
	writeJSON(w, http.StatusOK, ProviderList{Snapshot: snap, Confinement: s.cfg.Confinement})
}

// withHosts names, on each provider of snap, the live hosts that can run
// it, from their heartbeats. Without hosts (or when they cannot be read,
// which is logged) the providers name none.
func (s *Server) withHosts(r *http.Request, snap *registry.Snapshot) {
	if s.cfg.Hosts == nil {
		return
	}
	list, err := s.cfg.Hosts.List(r.Context())
	if err != nil {
		s.log.Warn("list hosts for the providers", logKeyErr, err)
		return
	}
	on := map[string][]string{}
	for _, h := range list {
		if !h.Alive {
			continue
		}
		for _, p := range h.Providers {
			on[p] = append(on[p], h.ID)
		}
	}
	provs := slices.Clone(snap.Providers) // the snapshot is shared
	for i := range provs {
		provs[i].Hosts = on[provs[i].ID]
		if provs[i].Hosts == nil {
			provs[i].Hosts = []string{}
		}
	}
	snap.Providers = provs
}

// patchProvider: PATCH /v1/providers/{id} with a JSON Merge Patch of the
// provider's entry, guarded by If-Match (absent: unconditional). A stale
// If-Match is 412; an invalid patch or result 422 with diagnostics.
func (s *Server) patchProvider(w http.ResponseWriter, r *http.Request) error {
	if err := checkJSONType(r, mergePatchType); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "request body is empty; want a JSON Merge Patch of the provider's entry")
	}
	id := r.PathValue("id")
	etag, err := s.reg.Patch(r.Context(), id, body, r.Header.Get("If-Match"))
	if err != nil {
		return err
	}
	res := PatchResult{ETag: etag}
	if p, ok := s.reg.Snapshot().Provider(id); ok {
		res.Provider = &p
	}
	w.Header().Set("ETag", etag)
	writeJSON(w, http.StatusOK, res)
	return nil
}

// CodeBuiltIn (409): DELETE of a built-in provider, which can only be
// disabled.
const CodeBuiltIn = "built_in"

// removeProvider: DELETE /v1/providers/{id} deletes a custom provider's
// entry from the providers file (If-Match as for PATCH). A built-in is 409
// built_in, an unknown id 404; 204 when removed.
func (s *Server) removeProvider(w http.ResponseWriter, r *http.Request) error {
	etag, err := s.reg.Remove(r.Context(), r.PathValue("id"), r.Header.Get("If-Match"))
	if errors.Is(err, registry.ErrBuiltIn) {
		return &Error{Status: http.StatusConflict, Code: CodeBuiltIn, Message: err.Error()}
	}
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// refreshProviders: POST /v1/providers/refresh reads the file again and
// looks every command up again. A rejected file is 422 with diagnostics
// (the last good config stays in force).
func (s *Server) refreshProviders(w http.ResponseWriter, r *http.Request) error {
	if err := s.reg.Reload(); err != nil {
		if ae := errorFor(err); ae.Code != CodeInvalidConfig {
			// Reload fails only for the file: unreadable is a config problem too.
			return &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalidConfig, Message: err.Error()}
		}
		return err
	}
	s.writeProviders(w, r)
	return nil
}

// probeProvider: POST /v1/providers/{id}/probe starts the agent, asks what
// it offers and stops it. A probe that fails on the agent's side is 502.
func (s *Server) probeProvider(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := s.longContext(r)
	defer cancel()
	info, err := s.reg.Probe(ctx, r.PathValue("id"))
	if err != nil {
		if ctx.Err() != nil {
			return s.shutdownErr(err)
		}
		if ae := errorFor(err); ae.Code == CodeInternal {
			return &Error{Status: http.StatusBadGateway, Code: CodeProbeFailed, Message: err.Error()}
		}
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}
