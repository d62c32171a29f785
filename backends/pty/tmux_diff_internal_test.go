package pty

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// handMadeStreams are byte streams for the differential test besides the
// recordings: sequences the emulator once got wrong.
var handMadeStreams = map[string]string{
	"kitty keyboard query":  "\x1b[3;5Habc\x1b[?uX",
	"kitty push, pop, set":  "\x1b[2;3Hab\x1b[>1u\x1b[<u\x1b[=1;1uc",
	"xtsave and xtrestore":  "\x1b[2;1H\x1b[s\x1b[1;1H\x1b[?1049sab\x1b[?1049r\x1b[uc",
	"cursor style, decrqm":  "a\x1b[2 qb\x1b[?2026$pc",
	"scroll region status":  "\x1b[2J\x1b[H\x1b[2;5r\x1b[2;1Hone\r\ntwo\r\nthree\r\nfour\r\nfive\r\nsix\x1b7\x1b[6;1H status \x1b8!",
	"save restore, erase":   "hello world\x1b7\x1b[3;3Hxx\x1b8\x1b[1K!\r\n\x1b[2Kgone\r\x1b[Knew",
	"claude-like input row": "\x1b[H\r\x1b[27B\u276f\u00a0\x1b[7m \x1b[27m\r\n\x1b[2C\u23f5\u23f5 auto mode on",
}

// TestEmulatorMatchesTmux feeds the same byte streams (every recording,
// cut at each key typed into it, and a few hand-made ones) to the emulator
// and to a detached tmux pane, and requires the same rendered text.
func TestEmulatorMatchesTmux(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	agenttest.RequireFeature(t, err == nil, "tmux, for the differential test of the emulator (.ci/run installs it)")
	files, err := RecordingFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		rec, err := LoadRecording(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			var segments [][]byte
			var cur []byte
			for _, s := range rec.Steps {
				if len(s.In) > 0 && len(cur) > 0 {
					segments = append(segments, cur)
					cur = nil
				}
				cur = append(cur, s.Out...)
			}
			segments = append(segments, cur)
			compareWithTmux(t, tmux, rec.Cols, rec.Rows, segments)
		})
	}
	for name, stream := range handMadeStreams {
		t.Run(name, func(t *testing.T) {
			compareWithTmux(t, tmux, 40, 8, [][]byte{[]byte(stream)})
		})
	}
}

// compareWithTmux feeds the segments in turn to a new emulator and to a
// tmux pane of the same size, comparing the screens after each.
func compareWithTmux(t *testing.T, tmux string, cols, rows int, segments [][]byte) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "sock")
	fifo := filepath.Join(dir, "in")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g status off\nset -g history-limit 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-S", sock, "-f", conf}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// Raw and without output processing: the pane gets the bytes as the
	// backend's master read them.
	run("new-session", "-d", "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows),
		"stty raw -echo -opost; exec cat "+fifo+"; sleep 600")
	t.Cleanup(func() { _ = exec.Command(tmux, "-S", sock, "kill-server").Run() })
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	scr := newScreen(cols, rows, nil)
	for i, seg := range segments {
		scr.write(seg)
		mark := fmt.Sprintf("agentpool-mark-%d", i)
		if _, err := w.Write(append(bytes.Clone(seg), "\x1b]2;"+mark+"\x1b\\"...)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for strings.TrimSpace(run("display", "-p", "#{pane_title}")) != mark {
			if time.Now().After(deadline) {
				t.Fatalf("tmux never processed segment %d", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
		want := normalizeScreen(run("capture-pane", "-p"))
		got := normalizeScreen(scr.text())
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("screen after segment %d of %d differs from tmux's (-tmux +emulator):\n%s", i+1, len(segments), diff)
		}
	}
}

// normalizeScreen trims trailing blanks of each row and trailing empty rows.
func normalizeScreen(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}
