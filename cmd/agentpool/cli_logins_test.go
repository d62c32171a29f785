package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/httpapi/apitest"
)

// TestLoginsCLI lists the pages logged in and logs them out, one and
// all; a daemon restart keeps them logged in.
func TestLoginsCLI(t *testing.T) {
	bin := agentpoolBinary(t)
	home := t.TempDir()
	d := startDaemon(t, bin, home)
	stop := func(d *daemon) {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	}
	t.Cleanup(func() { stop(d) })
	if out, err := d.cli("logins"); err != nil || !strings.Contains(out, "no page is logged in") {
		t.Errorf("logins with none = %q, %v; want it to say none", out, err)
	}
	login := func() httpapi.Login {
		out, err := d.cli("open")
		if err != nil {
			t.Fatalf("open: %v\n%s", err, out)
		}
		_, code, _ := strings.Cut(strings.TrimSpace(out), "#code=")
		resp, err := http.Post(d.client.BaseURL+"/v1/login", "application/json", strings.NewReader(`{"code":"`+code+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var l httpapi.Login
		if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&l) != nil {
			t.Fatalf("POST /v1/login = %d", resp.StatusCode)
		}
		return l
	}
	a, b := login(), login()
	aBearer, bBearer := pageBearer(t, d, a), pageBearer(t, d, b)
	out, err := d.cli("logins")
	if err != nil || !strings.Contains(out, a.ID) || !strings.Contains(out, b.ID) || !strings.Contains(out, "Go-http-client") {
		t.Errorf("logins = %q, %v; want both pages with their browser", out, err)
	}
	if out, err := d.cli("logins", "revoke", a.ID); err != nil || !strings.Contains(out, "logged out") {
		t.Errorf("logins revoke %s = %q, %v", a.ID, out, err)
	}
	if st := statusWith(t, d.client.BaseURL+"/v1/sessions", aBearer); st != http.StatusUnauthorized {
		t.Errorf("revoked page = %d; want 401", st)
	}
	if _, err := apitest.PageBearer(t.Context(), d.client.HTTP, d.client.BaseURL, a.ID, a.Credential); err == nil {
		t.Error("a revoked page authenticated again")
	}
	// A restart keeps the pages logged in (the daemon keeps their hashes):
	// they authenticate again, by challenge, for a new run bearer.
	stop(d)
	d = startDaemon(t, bin, home)
	if st := statusWith(t, d.client.BaseURL+"/v1/sessions", bBearer); st != http.StatusUnauthorized {
		t.Errorf("the last run's run bearer after a restart = %d; want 401", st)
	}
	bBearer = pageBearer(t, d, b)
	if st := statusWith(t, d.client.BaseURL+"/v1/sessions", bBearer); st != http.StatusOK {
		t.Errorf("page after a restart = %d; want 200", st)
	}
	if _, err := apitest.PageBearer(t.Context(), d.client.HTTP, d.client.BaseURL, a.ID, a.Credential); err == nil {
		t.Error("a revoked page authenticated after a restart")
	}
	if out, err := d.cli("logins", "revoke"); err == nil {
		t.Errorf("logins revoke without an id or --all = %q; want an error", out)
	}
	if out, err := d.cli("logins", "revoke", "--all"); err != nil || !strings.Contains(out, "1 page(s) logged out") {
		t.Errorf("logins revoke --all = %q, %v", out, err)
	}
	if st := statusWith(t, d.client.BaseURL+"/v1/sessions", bBearer); st != http.StatusUnauthorized {
		t.Errorf("page after revoke --all = %d; want 401", st)
	}
}
