package pty

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// floodBytes is 4 MiB of the kind of output an agent CLI writes: coloured
// log lines, a spinner redrawn with carriage return and clear-line, and a
// status bar kept in place with cursor save, move and restore.
func floodBytes() []byte {
	var sb strings.Builder
	for i := 0; sb.Len() < 4<<20; i++ {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&sb, "\x1b[32m%6d\x1b[0m \x1b[1mbuild\x1b[0m compiling package number %d of the project ... ok\r\n", i, i)
		case 1:
			fmt.Fprintf(&sb, "\r\x1b[K\x1b[33m%c thinking\x1b[0m", `|/-\`[i%4])
		case 2:
			fmt.Fprintf(&sb, "\x1b7\x1b[40;1H\x1b[7m status: %d lines \x1b[0m\x1b[K\x1b8", i)
		default:
			sb.WriteString("plain text line with some unicode: café – naïve — ✓\r\n")
		}
	}
	return []byte(sb.String())
}

func benchmarkEmulator(b *testing.B, check bool) {
	data := floodBytes()
	re := regexp.MustCompile(`(?m)^> $`)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		s := newScreen(120, 40, nil)
		for p := data; len(p) > 0; {
			n := min(len(p), readBufSize)
			s.write(p[:n])
			if check && re.Match(s.render()) {
				b.Fatal("pattern matched the flood")
			}
			p = p[n:]
		}
	}
}

// BenchmarkEmulatorThroughput feeds a 4 MiB flood through the emulator
// in 32 KiB reads.
func BenchmarkEmulatorThroughput(b *testing.B) { benchmarkEmulator(b, false) }

// BenchmarkEmulatorThroughputInTurn adds what a turn adds: rendering the
// screen and matching the ready pattern after every read.
func BenchmarkEmulatorThroughputInTurn(b *testing.B) { benchmarkEmulator(b, true) }

// BenchmarkRenderAndMatch is the cost of one readiness check on a full
// 120x40 screen.
func BenchmarkRenderAndMatch(b *testing.B) {
	s := newScreen(120, 40, nil)
	s.write(floodBytes()[:64<<10])
	re := regexp.MustCompile(`(?m)^> $`)
	for b.Loop() {
		re.Match(s.render())
	}
}
