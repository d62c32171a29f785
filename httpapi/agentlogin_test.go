package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
)

func TestPickAuthMethod(t *testing.T) {
	oauth := backends.AuthMethod{ID: "oauth", Name: "Browser", Type: backends.AuthAgent}
	key := backends.AuthMethod{ID: "key", Name: "Key", Type: backends.AuthEnvVar, Vars: []string{"K"}}
	tui := backends.AuthMethod{ID: "tui", Name: "Terminal", Type: backends.AuthTerminal}
	device := backends.AuthMethod{ID: "device", Name: "Device code", Type: backends.AuthAgent}
	for _, tc := range []struct {
		name    string
		methods []backends.AuthMethod
		pick    string
		want    string // method id, or "" for an error
		status  int
		msg     string
	}{
		{"only agent method", []backends.AuthMethod{oauth, key}, "", "oauth", 0, ""},
		{"named", []backends.AuthMethod{oauth, device}, "device", "device", 0, ""},
		{"two agent methods", []backends.AuthMethod{oauth, device}, "", "", http.StatusBadRequest, "choose one"},
		{"unknown", []backends.AuthMethod{oauth}, "nope", "", http.StatusBadRequest, `no login method "nope"`},
		{"env var", []backends.AuthMethod{oauth, key}, "key", "", http.StatusConflict, "reads K"},
		{"terminal", []backends.AuthMethod{tui}, "tui", "", http.StatusConflict, "agentpool login fake --method tui"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := pickAuthMethod("fake", tc.methods, tc.pick)
			var ae *Error
			switch {
			case tc.want != "" && (err != nil || m.ID != tc.want):
				t.Errorf("pickAuthMethod = %+v, %v; want %s", m, err, tc.want)
			case tc.want == "" && (!errors.As(err, &ae) || ae.Status != tc.status || !strings.Contains(ae.Message, tc.msg)):
				t.Errorf("pickAuthMethod error = %v; want %d with %q", err, tc.status, tc.msg)
			}
		})
	}
}

func TestLoginEndpointWithoutMethods(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	e.check(t, []apiCall{
		{name: "unknown", method: "POST", path: "/v1/providers/nope/login", status: 404, code: CodeUnknownProvider},
		{name: "not probed", method: "POST", path: "/v1/providers/demo/login", body: `{"method":"x"}`, status: 409, code: CodeUnsupported, want: "offers no login method"},
		{name: "bad json", method: "POST", path: "/v1/providers/demo/login", body: `{"method":`, status: 400, code: CodeBadRequest},
	})
}
