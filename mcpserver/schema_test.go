package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// arrayTypes lists the paths in schema v whose "type" is a list.
func arrayTypes(path string, v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			if _, isList := sub.([]any); k == "type" && isList {
				out = append(out, fmt.Sprintf("%s.type = %v", path, sub))
				continue
			}
			out = append(out, arrayTypes(path+"."+k, sub)...)
		}
	case []any:
		for i, sub := range v {
			out = append(out, arrayTypes(fmt.Sprintf("%s[%d]", path, i), sub)...)
		}
	}
	return out
}

// TestToolSchemasHaveSingleTypes walks every tool's input and output
// schema as a client receives them: a "type" that is a list (["null",
// "boolean"]) is refused by stricter function-calling APIs.
func TestToolSchemasHaveSingleTypes(t *testing.T) {
	cs, _ := connect(t, Config{}, &fakeAPI{})
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) == 0 {
		t.Fatal("ListTools returned no tools")
	}
	for _, tool := range tools.Tools {
		for what, schema := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			if schema == nil {
				continue
			}
			raw, err := json.Marshal(schema)
			if err != nil {
				t.Fatalf("tool %s: marshal its %s schema: %v", tool.Name, what, err)
			}
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatalf("tool %s: its %s schema %s: %v", tool.Name, what, raw, err)
			}
			if bad := arrayTypes(what, v); len(bad) > 0 {
				t.Errorf("tool %s: %s schema has list-valued types: %s", tool.Name, what, strings.Join(bad, "; "))
			}
		}
	}
}

// TestRequiredFieldEmpty: a required string argument given empty is a
// tool error naming the field, before the daemon is asked (which would
// answer about a URL).
func TestRequiredFieldEmpty(t *testing.T) {
	cs, _ := connect(t, Config{}, &fakeAPI{})
	for _, tc := range []struct {
		tool  string
		args  map[string]any
		field string
	}{
		{"get_session", map[string]any{"session": ""}, "session"},
		{"wait_turn", map[string]any{"session": " "}, "session"},
		{"list_permissions", map[string]any{"session": ""}, "session"},
		{"answer_permission", map[string]any{"session": "s1", "request": "", "choice": "allow"}, "request"},
		{"get_attempts", map[string]any{"id": ""}, "id"},
	} {
		text, _, isErr := callTool(t, cs, tc.tool, tc.args, nil)
		if !isErr || !strings.Contains(text, "invalid arguments: "+tc.field+" is required") {
			t.Errorf("%s(%v) = %q (error %v); want an invalid-argument error naming %s", tc.tool, tc.args, text, isErr, tc.field)
		}
	}
}
