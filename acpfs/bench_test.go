package acpfs

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// text4K is 4 KiB of text in 64-byte lines.
var text4K = strings.Repeat(strings.Repeat("x", 63)+"\n", 64)

// benchTree is makeTree plus a 4 KiB file three directories deep.
func benchTree(b *testing.B) (tree, string) {
	tr := makeTree(b)
	p := filepath.Join(tr.root, "src", "pkg", "sub", "file4k.txt")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text4K), 0o644); err != nil {
		b.Fatal(err)
	}
	return tr, p
}

func BenchmarkGuardResolve(b *testing.B) {
	tr, deep := benchTree(b)
	g, err := NewGuard(tr.root)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	for _, bc := range []struct{ name, path string }{
		{"root", tr.root},
		{"file", tr.root + "/a.txt"},
		{"depth4", deep},
		{"symlink", tr.root + "/link-in"},
		{"refused_lexical", tr.root + "-evil/secret.txt"},
		{"refused_symlink", tr.root + "/link-out-dir/canary.txt"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				g.Resolve(bc.path)
			}
		})
	}
}

func BenchmarkReadTextFile4K(b *testing.B) {
	tr, p := benchTree(b)
	f, err := NewFS(FSConfig{Root: tr.root, Audit: func(Op) {}})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	lat := make([]time.Duration, 0, 1024)
	b.SetBytes(int64(len(text4K)))
	for b.Loop() {
		start := time.Now()
		s, err := f.ReadTextFile(ctx, p, nil, nil)
		lat = append(lat, time.Since(start))
		if err != nil || len(s) != len(text4K) {
			b.Fatalf("ReadTextFile(%q) = %d bytes, %v", p, len(s), err)
		}
	}
	reportP50(b, lat)
}

func BenchmarkOSReadFile4K(b *testing.B) {
	_, p := benchTree(b)
	lat := make([]time.Duration, 0, 1024)
	b.SetBytes(int64(len(text4K)))
	for b.Loop() {
		start := time.Now()
		data, err := os.ReadFile(p)
		lat = append(lat, time.Since(start))
		if err != nil || len(data) != len(text4K) {
			b.Fatalf("ReadFile(%q) = %d bytes, %v", p, len(data), err)
		}
	}
	reportP50(b, lat)
}

func BenchmarkWriteTextFile4K(b *testing.B) {
	tr, p := benchTree(b)
	f, err := NewFS(FSConfig{Root: tr.root})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	b.SetBytes(int64(len(text4K)))
	for b.Loop() {
		if err := f.WriteTextFile(ctx, p, text4K); err != nil {
			b.Fatal(err)
		}
	}
}

// reportP50 reports the median of lat as the metric p50-ns.
func reportP50(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
}
