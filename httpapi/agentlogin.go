package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/registry"
)

// loginWait bounds how long an agent may take to log in (the user may be
// finishing it in a browser).
const loginWait = 5 * time.Minute

// loginRequest is the body of POST /v1/providers/{id}/login.
type loginRequest struct {
	// Method is the id of one of the agent's login methods; "" picks its
	// only "agent" method.
	Method string `json:"method"`
}

// loginResponse answers a login: the provider's status after it.
type loginResponse struct {
	Provider string                  `json:"provider"`
	Method   string                  `json:"method"`
	Status   registry.ProviderStatus `json:"status"`
}

// loginAgent asks a provider's agent to log in with one of its "agent"
// methods, the way the agent does it (a browser, a device code), then
// probes it again so its status says whether it worked. Methods the user
// carries out (a terminal, environment variables) are answered with what
// to do. The daemon never sees the credentials.
func (s *Server) loginAgent(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var req loginRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	p, ok := s.reg.Snapshot().Provider(id)
	if !ok {
		return &Error{Status: http.StatusNotFound, Code: CodeUnknownProvider, Message: fmt.Sprintf("no provider %q", id)}
	}
	if p.Probe != nil && p.Probe.NeedsAuth && len(p.Probe.Auth) == 0 {
		return &Error{Status: http.StatusConflict, Code: CodeUnsupported,
			Message: fmt.Sprintf("agent %q offers no login method to agentpool: %s", id, p.Diagnostic)}
	}
	if p.Probe == nil || len(p.Probe.Auth) == 0 {
		return &Error{Status: http.StatusConflict, Code: CodeUnsupported,
			Message: fmt.Sprintf("agent %q offers no login method (probe it first: agentpool providers refresh %s)", id, id)}
	}
	m, err := pickAuthMethod(id, p.Probe.Auth, req.Method)
	if err != nil {
		return err
	}
	if s.cfg.Login == nil {
		return &Error{Status: http.StatusConflict, Code: CodeUnsupported, Message: "this daemon cannot log agents in"}
	}
	ctx, cancel := s.longContext(r)
	defer cancel()
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(loginWait + time.Minute))
	lctx, lcancel := context.WithTimeout(ctx, loginWait)
	defer lcancel()
	if err := s.cfg.Login(lctx, id, m.ID); err != nil {
		if ctx.Err() != nil {
			return s.shutdownErr(err)
		}
		return &Error{Status: http.StatusBadGateway, Code: CodeProbeFailed, Message: err.Error()}
	}
	// The agent's status follows its login.
	if _, err := s.reg.Probe(ctx, id); err != nil {
		s.log.Info("probe after a login", "provider", id, "err", err)
	}
	p, _ = s.reg.Snapshot().Provider(id)
	writeJSON(w, http.StatusOK, loginResponse{Provider: id, Method: m.ID, Status: p})
	return nil
}

// pickAuthMethod returns the method of id to use: the one named, else the
// only "agent" one. A method the user carries out is refused with what to
// do instead.
func pickAuthMethod(id string, methods []backends.AuthMethod, name string) (backends.AuthMethod, error) {
	var agentMethods []backends.AuthMethod
	for _, m := range methods {
		if name != "" && m.ID == name {
			return m, userMethodErr(id, m)
		}
		if m.Type == backends.AuthAgent {
			agentMethods = append(agentMethods, m)
		}
	}
	ids := make([]string, len(methods))
	for i, m := range methods {
		ids[i] = m.ID + " (" + m.Type + ")"
	}
	switch {
	case name != "":
		return backends.AuthMethod{}, &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Field: "method",
			Message: fmt.Sprintf("agent %q offers no login method %q; it offers: %s", id, name, strings.Join(ids, ", "))}
	case len(agentMethods) == 1:
		return agentMethods[0], nil
	}
	return backends.AuthMethod{}, &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Field: "method",
		Message: fmt.Sprintf("choose one of agent %q's login methods: %s", id, strings.Join(ids, ", "))}
}

// userMethodErr refuses a method the daemon cannot carry out for the user.
func userMethodErr(id string, m backends.AuthMethod) error {
	switch m.Type {
	case backends.AuthAgent:
		return nil
	case backends.AuthTerminal:
		return &Error{Status: http.StatusConflict, Code: CodeUnsupported,
			Message: fmt.Sprintf("login method %q of agent %q runs in your terminal: agentpool login %s --method %s", m.ID, id, id, m.ID)}
	case backends.AuthEnvVar:
		return &Error{Status: http.StatusConflict, Code: CodeUnsupported,
			Message: fmt.Sprintf("login method %q of agent %q reads %s from the agent's environment: set it in the daemon's environment, or in the provider's \"env\"", m.ID, id, strings.Join(m.Vars, ", "))}
	}
	return &Error{Status: http.StatusConflict, Code: CodeUnsupported, Message: fmt.Sprintf("login method %q of agent %q is of an unknown type %q", m.ID, id, m.Type)}
}
