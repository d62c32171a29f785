package httpapi

import (
	"testing"

	"github.com/agentpool/agentpool/pool"
)

const reviewPatch = `diff --git a/a.go b/a.go
index 1111111..2222222 100644
--- a/a.go
+++ b/a.go
@@ -3,3 +3,4 @@ func f() {
 three
-four
+FOUR
+four and a half
 five
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-x
-y
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+hello
`

func TestParsePatch(t *testing.T) {
	files := parsePatch(reviewPatch)
	a := files["a.go"]
	if a == nil || len(a.Lines) != 5 {
		t.Fatalf("parsePatch: a.go = %+v; want 5 lines", a)
	}
	want := []patchLine{{' ', 3, 3, "three"}, {'-', 4, 4, "four"}, {'+', 5, 4, "FOUR"}, {'+', 5, 5, "four and a half"}, {' ', 5, 6, "five"}}
	for i, l := range want {
		if a.Lines[i] != l {
			t.Errorf("a.go line %d = %+v; want %+v", i, a.Lines[i], l)
		}
	}
	if g := files["gone.txt"]; g == nil || g.NewPath != "" || len(g.Lines) != 2 || g.Lines[1].Old != 2 {
		t.Errorf("gone.txt = %+v; want 2 removed lines", g)
	}
	if n := files["new.txt"]; n == nil || n.OldPath != "" || len(n.Lines) != 1 || n.Lines[0].New != 1 {
		t.Errorf("new.txt = %+v; want 1 added line numbered 1", n)
	}
}

func TestJudgeComment(t *testing.T) {
	d := pool.Diff{Files: []pool.FileChange{{Path: "a.go", Status: "modified"}, {Path: "gone.txt", Status: "deleted"}}, Patch: reviewPatch}
	files := parsePatch(reviewPatch)
	tests := []struct {
		name   string
		c      pool.ReviewComment
		reply  string
		want   bool
		wantBy string
	}{
		{"changed line", pool.ReviewComment{Path: "a.go", Line: 4, Side: "new"}, "", true, "diff"},
		{"near a change", pool.ReviewComment{Path: "a.go", Line: 6, Side: "new"}, "", true, "diff"},
		{"far from changes", pool.ReviewComment{Path: "a.go", Line: 40, Side: "new"}, "", false, ""},
		{"far but named", pool.ReviewComment{Path: "a.go", Line: 40, Side: "new"}, "fixed a.go:40.", true, "reply"},
		{"named by base name", pool.ReviewComment{Path: "pkg/b.go", Line: 7, Side: "new"}, "see b.go:7", true, "reply"},
		{"a longer number is not the line", pool.ReviewComment{Path: "pkg/b.go", Line: 7, Side: "new"}, "see b.go:70", false, ""},
		{"file deleted", pool.ReviewComment{Path: "gone.txt", Line: 1, Side: "new"}, "", true, "diff"},
		{"file untouched", pool.ReviewComment{Path: "c.go", Line: 1, Side: "new"}, "", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, by := judgeComment(tt.c, d, files, tt.reply)
			if got != tt.want || by != tt.wantBy {
				t.Errorf("judgeComment(%+v, reply %q) = %v, %q; want %v, %q", tt.c, tt.reply, got, by, tt.want, tt.wantBy)
			}
		})
	}
}

func TestCheckPRURL(t *testing.T) {
	for _, ok := range []string{"", "https://github.com/o/r/pull/1", "http://127.0.0.1:3000/o/r/pulls/2"} {
		if err := checkPRURL(ok); err != nil {
			t.Errorf("checkPRURL(%q) = %v; want nil", ok, err)
		}
	}
	for _, bad := range []string{"javascript:alert(1)", "github.com/o/r/pull/1", "https://u:p@github.com/x", "ftp://h/x", "https://h/x y"} {
		if err := checkPRURL(bad); err == nil {
			t.Errorf("checkPRURL(%q) = nil; want an error", bad)
		}
	}
}
