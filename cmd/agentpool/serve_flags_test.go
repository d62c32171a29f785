package main

import (
	"bytes"
	"strings"
	"testing"
)

// --store-conns takes a number of connections of at least
// store.MinPostgresConns, and only with a store, refused before anything
// starts with a message that says why.
func TestServeStoreConnsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--store-conns", "2"}, "", "at least 4"},
		{[]string{"--store-conns", "many"}, "", "at least 4"},
		{[]string{"--store-conns", "8"}, "", "--store-conns needs --store"},
		{nil, "3", "$AGENTPOOL_STORE_CONNS: want a number of connections of at least 4"},
	} {
		t.Setenv("AGENTPOOL_STORE", "")
		t.Setenv("AGENTPOOL_STORE_CONNS", tc.env)
		var out bytes.Buffer
		err := runServe(t.Context(), tc.args, &out, &out)
		msg := out.String()
		if err != nil {
			msg += err.Error()
		}
		if err == nil || !strings.Contains(msg, tc.want) {
			t.Errorf("serve %q ($AGENTPOOL_STORE_CONNS=%q) = %v, output %q; want an error saying %q", tc.args, tc.env, err, out.String(), tc.want)
		}
	}
}
