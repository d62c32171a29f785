package httpapi

import (
	"net/http"
	"testing"
)

// BenchmarkClientNewConnection measures a call on a new connection (what
// each CLI command makes): with the daemon's hello before the token is sent
// ("proved", the default) and without it ("unproved", the baseline of the
// same call over a plain transport). Compare the two in one run:
//
//	go test -run '^$' -bench ClientNewConnection -count 5 ./httpapi/
func BenchmarkClientNewConnection(b *testing.B) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(b, fp, nil)
	for _, tc := range []struct {
		name string
		hc   func() *http.Client
	}{
		{"unproved", func() *http.Client { return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()} }},
		{"proved", func() *http.Client { return provingClient(e.ts.URL, e.token) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			hc := tc.hc()
			c := &Client{BaseURL: e.ts.URL, Token: e.token, HTTP: hc}
			for b.Loop() {
				if _, err := c.Sessions(b.Context()); err != nil {
					b.Fatal(err)
				}
				hc.CloseIdleConnections() // the next call dials again
			}
		})
	}
}
