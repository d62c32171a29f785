package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

var samples = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e+10`, `true`, `false`, `null`, ` {"a" : [1, 2, {"b": null}] } `,
	`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi \"there\" \\ \u00e9 \n"}}}}`,
	`"\u00zz"`, `"\x"`, "\"\x01\"", `{"a":}`, `{"a" 1}`, `[1,]`, `{,}`, `01`, `1.`, `.5`, `1e`, `-`, `tru`, `nul`, `"abc`, `{"a":1}x`,
	`{"a":1,}`, `[1 2]`, "\"tab\tinside\"", `"\\\\"`, `"\\\\\""`, `{"k\"ey":"v\\"}`, `  `, ``, `"é" `, "\"\xff\xfe\"",
	`{"a":"12345678\"12345678\\\\12345678"}`, strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10001), strings.Repeat(`[`, 100) + strings.Repeat(`]`, 100),
}

// Valid agrees with encoding/json on every sample and on every prefix of
// them (the cut lines an agent may send).
func TestValidAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range samples {
		for n := 0; n <= len(s); n++ {
			if len(s) > 1000 && n != len(s) && n != len(s)-1 {
				continue // the deep nestings: whole and cut by one
			}
			if got, want := Valid([]byte(s[:n])), json.Valid([]byte(s[:n])); got != want {
				t.Errorf("Valid(%q) = %v; encoding/json says %v", clip(s[:n]), got, want)
			}
		}
	}
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func FuzzValid(f *testing.F) {
	for _, s := range samples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v; encoding/json says %v", b, got, want)
		}
		if Valid(b) {
			checkMembers(t, b)
		}
	})
}

// checkMembers checks, for a valid b, that Members gives every member of
// an object as written: the object rebuilt from them compacts to what b
// does, and for each one without escapes in its key encoding/json decodes
// the same value under that key (the last one of a repeated key).
func checkMembers(t *testing.T, b []byte) {
	t.Helper()
	var rebuilt bytes.Buffer
	rebuilt.WriteByte('{')
	last := map[string][]byte{}
	n := 0
	isObject := Members(b, func(key []byte, escaped bool, val []byte) bool {
		if n > 0 {
			rebuilt.WriteByte(',')
		}
		n++
		rebuilt.WriteString(`"` + string(key) + `":`)
		rebuilt.Write(val)
		if !json.Valid(val) {
			t.Fatalf("member %q of %q: value %q is not JSON", key, b, val)
		}
		if escaped != bytes.Contains(key, []byte(`\`)) {
			t.Fatalf("member %q of %q: escaped %v", key, b, escaped)
		}
		if !escaped && utf8.Valid(key) { // encoding/json makes bad UTF-8 U+FFFD
			last[string(key)] = val
		}
		return true
	})
	rebuilt.WriteByte('}')
	var m map[string]json.RawMessage
	wantObject := json.Unmarshal(b, &m) == nil && m != nil
	if isObject != wantObject {
		t.Fatalf("Members(%q) says object %v; encoding/json %v", b, isObject, wantObject)
	}
	if !isObject {
		return
	}
	var a, c bytes.Buffer
	if err := json.Compact(&a, b); err != nil {
		t.Fatal(err)
	}
	if err := json.Compact(&c, rebuilt.Bytes()); err != nil || a.String() != c.String() {
		t.Fatalf("Members(%q) rebuilt %q (%v)", b, rebuilt.Bytes(), err)
	}
	for k, v := range last {
		var x, y bytes.Buffer
		_ = json.Compact(&x, m[k])
		_ = json.Compact(&y, v)
		if x.String() != y.String() {
			t.Fatalf("member %q of %q: Members %q, encoding/json %q", k, b, v, m[k])
		}
	}
}

func TestMembers(t *testing.T) {
	for _, s := range samples {
		if json.Valid([]byte(s)) {
			checkMembers(t, []byte(s))
		}
	}
	var got []string
	Members([]byte(` { "a" : "x\"}" , "b\u0041":[{"c":"]"}], "d":-1.5e3 } `), func(k []byte, esc bool, v []byte) bool {
		got = append(got, string(k)+"="+string(v))
		return true
	})
	if want := `[a="x\"}" b\u0041=[{"c":"]"}] d=-1.5e3]`; strings.Join(got, " ") != strings.Trim(want, "[]") {
		t.Errorf("Members = %q; want %s", got, want)
	}
}

// BenchmarkValid compares Valid with encoding/json.Valid on a 1 MiB
// message chunk line.
func BenchmarkValid(b *testing.B) {
	text := strings.Repeat("all work and no play makes jack a dull boy, \"quoted\"\n", 1<<20/52)
	tb, _ := json.Marshal(text)
	line := []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":` + string(tb) + `}}}}`)
	b.Run("jsonscan", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			if !Valid(line) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			if !json.Valid(line) {
				b.Fatal("invalid")
			}
		}
	})
}
