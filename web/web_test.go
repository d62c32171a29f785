package web

import (
	"io/fs"
	"path"
	"strings"
	"testing"
)

// pageBudget is the most the page may weigh without the terminal library,
// uncompressed (it is served gzipped, at about a third).
const pageBudget = 300 << 10

func TestAssets(t *testing.T) {
	a := Assets()
	if _, err := fs.Stat(a, Index); err != nil {
		t.Fatalf("Stat(%q) error = %v", Index, err)
	}
	for _, lib := range []string{"vendor/xterm/xterm.mjs", "vendor/xterm/LICENSE", "vendor/xterm/VERSION"} {
		if _, err := fs.Stat(a, lib); err != nil {
			t.Errorf("vendored file %s: %v", lib, err)
		}
	}
	total := 0
	err := fs.WalkDir(a, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(p, "vendor/") {
			return err
		}
		b, err := fs.ReadFile(a, p)
		if err != nil {
			return err
		}
		total += len(b)
		if path.Ext(p) != ".js" {
			return nil
		}
		// Agent output must reach the page as text: no API that parses HTML.
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "DOMParser", "createContextualFragment"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s uses %s; the page must build nodes with text only", p, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total > pageBudget {
		t.Errorf("the page weighs %d bytes without the terminal library; the budget is %d", total, pageBudget)
	}
	t.Logf("the page weighs %d bytes without the terminal library", total)
}
