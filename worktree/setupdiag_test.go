package worktree

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestParseSetupReportsEveryProblemWithItsPosition: a setup file with
// several mistakes gets all of them, each with its line and column (an
// unknown field included), not only the first.
func TestParseSetupReportsEveryProblemWithItsPosition(t *testing.T) {
	in := `{
  "copy": [".env", "../secrets", 3],
  "setup": {
    "command": ["make"],
    "timout": "5m",
    "timeout": "forever"
  },
  "extra": true
}`
	_, err := ParseSetup([]byte(in))
	var fe *SetupFileError
	if !errors.As(err, &fe) {
		t.Fatalf("ParseSetup() error = %v; want a *SetupFileError", err)
	}
	want := []string{
		`line 2, column 20: copy[1]: "../secrets": leaves the repository`,
		`line 2, column 34: copy[2]: want a string, got a number`,
		`line 5, column 5: setup: unknown field "timout"`,
		`line 6, column 16: setup.timeout: "forever" is not a duration`,
		`line 8, column 3: unknown field "extra"`,
	}
	if len(fe.Problems) != len(want) {
		t.Errorf("ParseSetup() problems = %q; want %d of them", err, len(want))
	}
	for i, w := range want {
		if i < len(fe.Problems) && !strings.HasPrefix(fe.Problems[i].String(), w) {
			t.Errorf("problem %d = %q; want %q", i, fe.Problems[i], w)
		}
	}

	// Many problems: the first 20 and a count of the rest.
	var b strings.Builder
	b.WriteString(`{"copy": [`)
	for i := range 25 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"/abs%d"`, i)
	}
	b.WriteString(`]}`)
	_, err = ParseSetup([]byte(b.String()))
	if !errors.As(err, &fe) || len(fe.Problems) != maxSetupProblems || fe.More != 5 || !strings.HasSuffix(err.Error(), "; and 5 more") {
		t.Errorf("ParseSetup(25 bad patterns) = %v; want %d problems and 5 more", err, maxSetupProblems)
	}

	// LoadSetup names the file, and the user's message every position.
	top := t.TempDir()
	writeFile(t, top, SetupFileName, in)
	_, err = LoadSetup(top)
	if !errors.Is(err, ErrSetupConfig) {
		t.Fatalf("LoadSetup() = %v; want ErrSetupConfig", err)
	}
	var uf interface{ UserMessage() string }
	if !errors.As(err, &uf) || !strings.Contains(uf.UserMessage(), SetupFileName+": line 2, column 20") || !strings.Contains(uf.UserMessage(), "line 8, column 3") {
		t.Errorf("LoadSetup() user message = %v; want the file and each problem's position", err)
	}
}
