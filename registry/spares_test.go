package registry

import (
	"strings"
	"testing"
)

// "spares" is a count from 0 to MaxSpares, checked by the loader and the
// schema alike, and kept through "extends".
func TestSparesField(t *testing.T) {
	sch := compileSchema(t)
	tests := []struct {
		name, spares string
		want         int
		err          string // "" = valid
	}{
		{"two", `2`, 2, ""},
		{"none", `0`, 0, ""},
		{"most", `8`, 8, ""},
		{"too many", `9`, 0, "out of range [0, 8]"},
		{"negative", `-1`, 0, "out of range"},
		{"fraction", `1.5`, 0, "integer"},
		{"text", `"2"`, 0, "want"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := `{"version": 1, "providers": {"claude": {"spares": ` + tc.spares + `}}}`
			defs, err := parseDocument("providers.json", []byte(doc), builtins("/bin/agentpool"))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "providers.claude.spares") {
					t.Errorf("parseDocument(spares %s) error = %v; want one naming providers.claude.spares: %q", tc.spares, err, tc.err)
				}
				if validateAgainst(t, sch, []byte(doc)) == nil {
					t.Errorf("schema accepts spares %s", tc.spares)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseDocument(spares %s) error = %v", tc.spares, err)
			}
			if err := validateAgainst(t, sch, []byte(doc)); err != nil {
				t.Errorf("schema refuses spares %s: %v", tc.spares, err)
			}
			if got := defs["claude"].spares; got != tc.want {
				t.Errorf("spares = %d; want %d", got, tc.want)
			}
		})
	}
	doc := `{"version": 1, "providers": {"claude": {"spares": 3}, "claude-fast": {"extends": "claude", "label": "fast"}}}`
	defs, err := parseDocument("providers.json", []byte(doc), builtins("/bin/agentpool"))
	if err != nil {
		t.Fatal(err)
	}
	if got := defs["claude-fast"].spares; got != 3 {
		t.Errorf("spares of a provider extending claude = %d; want 3, its base's", got)
	}
}
