package worktree

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSetupEventOKOnlyWhenEnded: "ok" is in the JSON of setup.ended only
// (true or false); copied, started and output steps that succeeded do not
// read as "ok": false.
func TestSetupEventOKOnlyWhenEnded(t *testing.T) {
	code := 0
	for _, tc := range []struct {
		ev     SetupEvent
		wantOK string // "" = no "ok" key
	}{
		{SetupEvent{Kind: SetupCopied, File: ".agentpool.json", Copied: []string{".env"}}, ""},
		{SetupEvent{Kind: SetupStarted, File: ".agentpool.json", Command: []string{"make"}, Timeout: "5m0s"}, ""},
		{SetupEvent{Kind: SetupOutput, File: ".agentpool.json", Output: "built\n"}, ""},
		{SetupEvent{Kind: SetupUntrusted, File: ".agentpool.json", SHA256: "ab"}, ""},
		{SetupEvent{Kind: SetupEnded, File: ".agentpool.json", OK: true, ExitCode: &code}, "true"},
		{SetupEvent{Kind: SetupEnded, File: ".agentpool.json", Error: "exit status 2"}, "false"},
	} {
		b, err := json.Marshal(tc.ev)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if got := string(m["ok"]); got != tc.wantOK {
			t.Errorf("JSON of a %s event = %s; want \"ok\" %q", tc.ev.Kind, b, tc.wantOK)
		}
		if strings.Contains(string(b), "Kind") {
			t.Errorf("JSON of a %s event = %s; want no Kind", tc.ev.Kind, b)
		}
		// Readers decode it as before.
		var back SetupEvent
		if err := json.Unmarshal(b, &back); err != nil || back.OK != tc.ev.OK || back.File != tc.ev.File {
			t.Errorf("decoding %s = %+v, %v; want OK %v and the file back", b, back, err, tc.ev.OK)
		}
	}
	// A pointer marshals the same.
	b, _ := json.Marshal(&SetupEvent{Kind: SetupCopied})
	if strings.Contains(string(b), `"ok"`) {
		t.Errorf("JSON of *SetupEvent copied = %s; want no ok", b)
	}
}
