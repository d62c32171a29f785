package pty_test

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/agentpool/agentpool/backends/pty"
)

// envReplay makes the test binary replay a recording (its path) as if it
// were the recorded program.
const envReplay = "AGENTPOOL_PTY_REPLAY"

// maxReplayGap caps the pause between two replayed writes.
const maxReplayGap = 40 * time.Millisecond

// runReplay plays a recording back on its terminal: it writes what the
// program wrote, with the recorded pauses (capped), and at each key that
// the program acted on (Step.Wait) it waits until that key is typed. After
// the last step it waits for the hang-up.
func runReplay(path string) {
	rec, err := pty.LoadRecording(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(1)
	}
	if err := makeRaw(0); err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(1)
	}
	keys := make(chan []byte, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := os.Stdin.Read(buf)
			if n > 0 {
				keys <- bytes.Clone(buf[:n])
			}
			if err != nil || n == 0 {
				close(keys)
				return
			}
		}
	}()
	var typed []byte
	for _, s := range rec.Steps {
		if len(s.Out) > 0 {
			time.Sleep(min(time.Duration(s.MS)*time.Millisecond, maxReplayGap))
			_, _ = os.Stdout.Write(s.Out)
			continue
		}
		if len(s.Wait) == 0 {
			continue
		}
		for {
			if i := keyIndex(typed, s.Wait); i >= 0 {
				typed = typed[i+len(s.Wait):]
				break
			}
			k, ok := <-keys
			if !ok {
				os.Exit(0)
			}
			typed = append(typed, k...)
		}
	}
	for range keys {
	}
	os.Exit(0)
}

// keyIndex finds key in what was typed; a lone Esc is not the start of a
// paste marker or of an answer to a terminal query.
func keyIndex(typed, key []byte) int {
	if !bytes.Equal(key, []byte("\x1b")) {
		return bytes.Index(typed, key)
	}
	for i, c := range typed {
		if c == 0x1b && (i+1 == len(typed) || typed[i+1] != '[') {
			return i
		}
	}
	return -1
}

// The built-in claude-cli provider's terminal settings (registry/builtin.go),
// checked here against the real program's screens.
const (
	claudeReadyPattern = `^❯\x{a0} *$`
	claudeBusyPattern  = `(?i)esc to interrupt`
	claudeCancelKeys   = "\x1b"
	claudeClearKeys    = "\x15"
)

// claudeIgnore are the claude-cli provider's ignore patterns: logo rows,
// notices, the mode row, rule lines, the "worked for" line and key hints.
var claudeIgnore = []string{
	`^\s*[▐▝▘▗▖▛▜▙▟█▀▄▌]{2}`, `^▎ `, `^\s*[⏵⏸]`, `^\s*─{3,}\s*$`, `^✻ .* for \d+[hms]`, `ctrl\+\w+ to `,
}
