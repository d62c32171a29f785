package pty_test

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// envFakeAider makes the test binary a stand-in for aider 0.86's prompt
// loop (PyPI, and so aider, cannot be installed here): the prompt "> "
// under a rule line and the list of files in the chat; an answer, an
// applied edit and a token line per prompt, after FAKE_AIDER_DELAY_MS; and
// aider's Ctrl-C rule: the first Ctrl-C interrupts (or, at the prompt,
// says "^C again to exit"), a second within 2 s exits.
const (
	envFakeAider   = "AGENTPOOL_PTY_FAKE_AIDER"
	envAiderDelay  = "FAKE_AIDER_DELAY_MS"
	aiderExitAfter = 2 * time.Second
)

func runFakeAider() {
	signal.Ignore(syscall.SIGHUP)
	if err := makeRaw(0); err != nil {
		fmt.Fprintln(os.Stderr, "fake aider:", err)
		os.Exit(1)
	}
	delay := 300 * time.Millisecond
	if ms := os.Getenv(envAiderDelay); ms != "" {
		var n int
		if _, err := fmt.Sscan(ms, &n); err == nil {
			delay = time.Duration(n) * time.Millisecond
		}
	}
	out := func(s string) { _, _ = os.Stdout.WriteString(s) }
	keys := make(chan byte, 4096)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := os.Stdin.Read(buf)
			for _, c := range bytes.ReplaceAll(bytes.ReplaceAll(buf[:n], []byte("\x1b[200~"), nil), []byte("\x1b[201~"), nil) {
				keys <- c
			}
			if err != nil || n == 0 {
				close(keys)
				return
			}
		}
	}()
	rule := strings.Repeat("─", 60)
	promptArea := rule + "\r\nhello.py\r\n> "
	out("\x1b[?2004h" + "Aider v0.86.0\r\nMain model: mock with diff edit format\r\nGit repo: .git with 1 files\r\n" +
		"Repo-map: using 1024 tokens, auto refresh\r\n" + promptArea)
	var lastCtrlC time.Time
	ctrlC := func() {
		if !lastCtrlC.IsZero() && time.Since(lastCtrlC) < aiderExitAfter {
			out("\r\n\r\n^C KeyboardInterrupt\r\n")
			os.Exit(0)
		}
		lastCtrlC = time.Now()
	}
	var line []byte
	for c := range keys {
		switch {
		case c == 0x03:
			ctrlC()
			line = line[:0]
			out("\r\n^C again to exit\r\n" + promptArea)
		case c == '\r':
			text := string(line)
			line = line[:0]
			out("\r\n")
			if !aiderWork(keys, delay, text, out) {
				ctrlC()
				out("\r\n^C again to exit\r\n" + promptArea)
				continue
			}
			out(fmt.Sprintf("\r\nI'll change the greeting for %q.\r\n\r\nhello.py\r\n```python\r\n<<<<<<< SEARCH\r\nprint(\"hello\")\r\n=======\r\nprint(\"goodbye\")\r\n>>>>>>> REPLACE\r\n```\r\n\r\n", text) +
				"Tokens: 847 sent, 56 received. Cost: $0.0012 message, $0.0012 session.\r\nApplied edit to hello.py\r\nCommit 1a2b3c4 fix: print goodbye\r\n" + promptArea)
		case c >= 0x20:
			line = append(line, c)
			out(string(c))
		}
	}
	os.Exit(0)
}

// aiderWork waits for the model; false when Ctrl-C interrupted it.
func aiderWork(keys chan byte, delay time.Duration, text string, out func(string)) bool {
	if strings.HasPrefix(text, "slow") {
		delay = time.Hour
	}
	out("Waiting for mock...")
	end := time.After(delay)
	for {
		select {
		case <-end:
			out("\r\x1b[K")
			return true
		case c, ok := <-keys:
			if !ok {
				os.Exit(0)
			}
			if c == 0x03 {
				out("\r\x1b[K")
				return false
			}
		}
	}
}
