package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/pool"
)

// fakeTrust is a Trust of one repository's setup file.
type fakeTrust struct {
	file    SetupFile
	trusted []TrustEntry
}

func (f *fakeTrust) SetupFile(_ context.Context, repo string) (SetupFile, error) {
	if repo != f.file.Repo {
		return SetupFile{}, fmt.Errorf("%s has no .agentpool.json: %w", repo, pool.ErrNotFound)
	}
	return f.file, nil
}

func (f *fakeTrust) Trust(_ context.Context, repo, sum string) (TrustResult, error) {
	if sum != f.file.SHA256 {
		return TrustResult{}, fmt.Errorf("the setup file changed since it was read: %w", pool.ErrConflict)
	}
	f.trusted = append(f.trusted, TrustEntry{Repo: repo, SHA256: sum})
	sf := f.file
	sf.Trusted = true
	return TrustResult{SetupFile: sf, Waiting: []string{"s1"}}, nil
}

func (f *fakeTrust) Revoke(_ context.Context, repo string) (bool, error) {
	n := len(f.trusted)
	f.trusted = nil
	return n > 0, nil
}

func (f *fakeTrust) List() ([]TrustEntry, error) { return f.trusted, nil }

// setupPool is the fake pool with RunSetup.
type setupPool struct {
	*fakePool
	ran []string
}

func (p *setupPool) RunSetup(_ context.Context, id string) error {
	switch id {
	case "busy":
		return fmt.Errorf("session %q is running a turn: %w", id, pool.ErrBusy)
	case "untrusted":
		return fmt.Errorf("the setup file is not trusted: %w", pool.ErrConflict)
	}
	p.ran = append(p.ran, id)
	return nil
}

func TestTrustEndpoints(t *testing.T) {
	ctx := context.Background()
	sum := strings.Repeat("ab", 32)
	ft := &fakeTrust{file: SetupFile{Repo: "/r", File: "/r/.agentpool.json", SHA256: sum, Content: `{"setup": {"command": ["make"]}}`, Command: []string{"make"}}}
	sp := &setupPool{fakePool: &fakePool{}}
	env := newTestEnv(t, sp.fakePool, func(c *Config) { c.Pool = sp; c.Trust = ft })

	sf, err := env.client.SetupFile(ctx, "/r")
	if err != nil || sf.SHA256 != sum || sf.Trusted || !strings.Contains(sf.Content, "make") {
		t.Errorf("SetupFile() = %+v, %v; want the untrusted file with its content", sf, err)
	}
	if _, err := env.client.SetupFile(ctx, "/elsewhere"); !IsCode(err, CodeNotFound) {
		t.Errorf("SetupFile() of a repository without one: %v; want 404", err)
	}
	// The page asks with missing=ok: no setup file is an answer, not an error.
	var none SetupFile
	if err := env.client.call(ctx, http.MethodGet, "/v1/trust?repo=%2Felsewhere&missing=ok", nil, &none); err != nil || !none.Missing || none.Repo != "/elsewhere" || none.SHA256 != "" {
		t.Errorf("GET /v1/trust?repo=/elsewhere&missing=ok = %+v, %v; want 200 with missing", none, err)
	}
	var some SetupFile
	if err := env.client.call(ctx, http.MethodGet, "/v1/trust?repo=%2Fr&missing=ok", nil, &some); err != nil || some.Missing || some.SHA256 != sum {
		t.Errorf("GET /v1/trust?repo=/r&missing=ok = %+v, %v; want the file", some, err)
	}
	if _, err := env.client.Trust(ctx, "/r", strings.Repeat("00", 32)); !IsCode(err, CodeConflict) {
		t.Errorf("Trust() with another hash: %v; want 409 conflict", err)
	}
	if _, err := env.client.Trust(ctx, "/r", "short"); !IsCode(err, CodeBadRequest) {
		t.Errorf("Trust() with a malformed hash: %v; want 400", err)
	}
	res, err := env.client.Trust(ctx, "/r", sum)
	if err != nil || !res.Trusted || strings.Join(res.Waiting, " ") != "s1" {
		t.Errorf("Trust() = %+v, %v; want trusted with s1 waiting", res, err)
	}
	if l, err := env.client.TrustList(ctx); err != nil || len(l) != 1 || l[0].Repo != "/r" {
		t.Errorf("TrustList() = %+v, %v", l, err)
	}
	if err := env.client.RevokeTrust(ctx, "/r"); err != nil {
		t.Errorf("RevokeTrust() = %v", err)
	}
	if err := env.client.RevokeTrust(ctx, "/r"); !IsCode(err, CodeNotFound) {
		t.Errorf("RevokeTrust() of nothing: %v; want 404", err)
	}

	if err := env.client.RunSetup(ctx, "s1"); err != nil || strings.Join(sp.ran, " ") != "s1" {
		t.Errorf("RunSetup() = %v (ran %v)", err, sp.ran)
	}
	for id, code := range map[string]string{"busy": CodeBusy, "untrusted": CodeConflict} {
		var ae *Error
		if err := env.client.RunSetup(ctx, id); !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != code {
			t.Errorf("RunSetup(%q) = %v; want 409 %s", id, err, code)
		}
	}

	// Without a Trust, the endpoints answer 501.
	plain := newTestEnv(t, &fakePool{}, nil)
	if _, err := plain.client.TrustList(ctx); !IsCode(err, CodeNotImplemented) {
		t.Errorf("TrustList() without a Trust: %v; want 501", err)
	}
}
