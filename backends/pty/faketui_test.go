package pty_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// Environment of the fake TUI (the test binary re-executed by TestMain).
const (
	envFake        = "AGENTPOOL_PTY_FAKE_TUI"
	envDelay       = "FAKE_TUI_DELAY_MS"   // time per turn, default 200
	envStubborn    = "FAKE_TUI_STUBBORN"   // also ignore SIGTERM and keep running after the hang-up
	envGrandkids   = "FAKE_TUI_GRANDKIDS"  // leave two sleepers: one in our group, one in a group of its own
	envNoBracket   = "FAKE_TUI_NO_BRACKET" // do not enable bracketed paste
	envExitAtStart = "FAKE_TUI_EXIT_AT_START"
	envAsk         = "FAKE_TUI_ASK"     // ask a first-run question before the UI
	envEscaper     = "FAKE_TUI_ESCAPER" // at start, leave a setsid'd sleeper writing its pid to this file
	readyPattern   = `^> $`
)

// fakeTUI is a full-screen terminal program in the style of an agent CLI:
// raw mode, bracketed paste, a coloured header, a status bar kept outside a
// scroll region with cursor save/move/restore, a spinner while it works,
// and "> " as its prompt. It ignores SIGHUP. Lines it understands:
// "hang" (works until Ctrl-C), "deaf" (works forever, ignores Ctrl-C),
// "crash" (exits 3), "exit", "flood N" (N bytes of output), "bench" (stamps
// the monotonic time in the same write as the prompt), "size"; anything
// else is echoed back as "echo: LINE" after the delay.
type fakeTUI struct {
	out      *os.File
	cols     int
	rows     int
	line     []byte
	turns    int
	delay    time.Duration
	input    chan []byte
	winch    chan os.Signal
	stubborn bool
}

func runFakeTUI() {
	signal.Ignore(syscall.SIGHUP)
	f := &fakeTUI{out: os.Stdout, input: make(chan []byte, 64), winch: make(chan os.Signal, 1), delay: 200 * time.Millisecond}
	f.stubborn = os.Getenv(envStubborn) != ""
	if f.stubborn {
		signal.Ignore(syscall.SIGTERM)
	}
	if ms, err := strconv.Atoi(os.Getenv(envDelay)); err == nil {
		f.delay = time.Duration(ms) * time.Millisecond
	}
	if pidfile := os.Getenv(envEscaper); pidfile != "" {
		if exe, err := os.Executable(); err == nil {
			cmd := exec.Command(exe, pidfile)
			cmd.Env = append(os.Environ(), agenttest.EnvHelper+"="+agenttest.HelperSetsidSleeper, envFake+"=", envEscaper+"=")
			if cmd.Start() == nil {
				go func() { _ = cmd.Wait() }()
			}
		}
	}
	if os.Getenv(envExitAtStart) != "" {
		f.write("boom: cannot start\r\n")
		os.Exit(2)
	}
	if os.Getenv(envGrandkids) != "" {
		spawnSleeper(false)
		spawnSleeper(true)
	}
	if err := makeRaw(0); err != nil {
		fmt.Fprintln(os.Stderr, "fake tui:", err)
		os.Exit(1)
	}
	signal.Notify(f.winch, syscall.SIGWINCH)
	f.size()
	go f.readInput()
	if os.Getenv(envAsk) != "" {
		f.write("Trust this folder? (y/n) ")
		for p := range f.input {
			if bytes.IndexByte(p, 'y') >= 0 {
				break
			}
		}
	}
	if os.Getenv(envNoBracket) == "" {
		f.write("\x1b[?2004h")
	}
	f.write(fmt.Sprintf("\x1b[2J\x1b[H\x1b[1;32mfake-tui\x1b[0m \x1b[38;5;208margs: %s\x1b[0m\r\n", strings.Join(os.Args[1:], " ")))
	f.write(fmt.Sprintf("\x1b[2;%dr\x1b[2;1H", f.rows-1)) // scroll region between header and status bar
	f.status("idle")
	f.write(f.prompt())
	f.loop()
}

func (f *fakeTUI) write(s string) { _, _ = f.out.WriteString(s) }

func (f *fakeTUI) prompt() string { return "\x1b[36m>\x1b[0m " }

func (f *fakeTUI) status(s string) { f.write(f.statusSeq(s)) }

func (f *fakeTUI) statusSeq(s string) string {
	return fmt.Sprintf("\x1b7\x1b[%d;1H\x1b[7m status: %s \x1b[0m\x1b[K\x1b8", f.rows, s)
}

func (f *fakeTUI) size() {
	ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ)
	if err == nil {
		f.cols, f.rows = int(ws.Col), int(ws.Row)
	}
}

func (f *fakeTUI) readInput() {
	buf := make([]byte, 4096)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			f.input <- bytes.Clone(buf[:n])
		}
		if err != nil || n == 0 {
			close(f.input)
			return
		}
	}
}

// loop reads keys at the prompt.
func (f *fakeTUI) loop() {
	var pending []byte
	for {
		select {
		case <-f.winch:
			f.size()
			// One write, so the screen never shows half a redraw.
			f.write(fmt.Sprintf("\x1b[2;%dr\r\x1b[K[resized %dx%d]\r\n", f.rows-1, f.cols, f.rows) +
				f.statusSeq("idle") + f.prompt() + string(f.line))
			continue
		case p, ok := <-f.input:
			if !ok {
				f.hungUp()
				return
			}
			pending = append(pending, p...)
		}
	keys:
		for len(pending) > 0 {
			switch {
			case bytes.HasPrefix(pending, []byte("\x1b[200~")), bytes.HasPrefix(pending, []byte("\x1b[201~")):
				pending = pending[6:]
				continue
			case pending[0] == 0x1b && len(pending) < 6:
				break keys // an incomplete paste marker
			}
			c := pending[0]
			pending = pending[1:]
			switch {
			case c == '\r':
				f.submit()
			case c == 0x03:
				f.line = f.line[:0]
				f.write("^C\r\n" + f.prompt())
			case c == 0x7f:
				if len(f.line) > 0 {
					f.line = f.line[:len(f.line)-1]
					f.write("\b \b")
				}
			case c >= 0x20:
				f.line = append(f.line, c)
				f.write(string(c))
			}
		}
	}
}

func (f *fakeTUI) hungUp() {
	if !f.stubborn {
		os.Exit(0)
	}
	for {
		time.Sleep(time.Hour)
	}
}

func (f *fakeTUI) submit() {
	line := string(f.line)
	f.line = f.line[:0]
	f.turns++
	f.write("\r\n")
	f.status("working")
	fields := strings.Fields(line)
	cmd := ""
	if len(fields) > 0 {
		cmd = fields[0]
	}
	switch cmd {
	case "exit":
		os.Exit(0)
	case "crash":
		f.write("fatal: crashed\r\n")
		os.Exit(3)
	case "bench":
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		f.status("idle")
		f.write(fmt.Sprintf("t=%d\r\n%s", ts.Nano(), f.prompt()))
		return
	case "size":
		f.finish(fmt.Sprintf("size %dx%d", f.cols, f.rows))
		return
	case "flood":
		n, _ := strconv.Atoi(fields[1])
		row := strings.Repeat("x", 99) + "\n"
		var sb strings.Builder
		for sb.Len() < n {
			sb.WriteString(row)
		}
		f.write(sb.String()[:n])
		f.finish("flooded")
		return
	}
	if f.work(cmd) {
		f.finish("echo: " + line)
	}
}

// work shows a spinner for the delay (forever for hang and deaf); false
// when interrupted.
func (f *fakeTUI) work(cmd string) bool {
	frames := []string{"|", "/", "-", "\\"}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	end := time.After(f.delay)
	if cmd == "hang" || cmd == "deaf" {
		end = nil
	}
	for i := 0; ; i++ {
		f.write(fmt.Sprintf("\r\x1b[K\x1b[33m%s thinking\x1b[0m", frames[i%len(frames)]))
		select {
		case <-end:
			f.write("\r\x1b[K")
			return true
		case <-tick.C:
		case p, ok := <-f.input:
			if !ok {
				f.hungUp()
			}
			if bytes.IndexByte(p, 0x03) >= 0 && cmd != "deaf" {
				f.write("\r\x1b[K^C interrupted\r\n")
				f.status("idle")
				f.write(f.prompt())
				return false
			}
		}
	}
}

func (f *fakeTUI) finish(text string) {
	f.write("\r\x1b[K" + text + "\r\n")
	f.status("idle")
	f.write(f.prompt())
}

// makeRaw puts the terminal in raw mode, as cfmakeraw does.
func makeRaw(fd int) error {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	return unix.IoctlSetTermios(fd, unix.TCSETS, t)
}

// spawnSleeper leaves a process that ignores SIGTERM and SIGHUP behind, in
// our process group or in a new one of the same session (a shell job). The
// one in its own group keeps the terminal open.
func spawnSleeper(ownGroup bool) {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), agenttest.EnvHelper+"="+agenttest.HelperSleeper, envFake+"=")
	if ownGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stdout = os.Stdout
	}
	if err := cmd.Start(); err != nil {
		return
	}
	go func() { _ = cmd.Wait() }()
}
