package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// nodeKind is the JSON type of a node.
type nodeKind uint8

const (
	kindNull nodeKind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// String names the kind the way diagnostics do.
func (k nodeKind) String() string {
	switch k {
	case kindBool:
		return "boolean"
	case kindNumber:
		return "number"
	case kindString:
		return "string"
	case kindArray:
		return "array"
	case kindObject:
		return "object"
	}
	return "null"
}

// node is one JSON value with the byte offset where it starts, so that every
// diagnostic can name a line and column. Objects keep their keys in order.
type node struct {
	kind    nodeKind
	off     int
	str     string
	num     json.Number
	b       bool
	members []member
	elems   []*node
}

// member is one key of an object.
type member struct {
	key    string
	keyOff int
	val    *node
}

// posError is a problem at a byte offset of the document.
type posError struct {
	off  int
	path string
	msg  string
}

// parseTree parses data, which must hold exactly one JSON value, into a tree.
// Syntax errors, trailing data and duplicate keys are reported with their
// offset.
func parseTree(data []byte) (*node, *posError) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &posError{off: 0, msg: "empty file (want a JSON object with \"version\" and \"providers\")"}
	}
	if !json.Valid(data) {
		return nil, syntaxError(data)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	p := &treeParser{dec: dec, data: data}
	n, perr := p.value("")
	if perr != nil {
		return nil, perr
	}
	return n, nil
}

// syntaxError locates the syntax error in data, which json.Valid rejected.
func syntaxError(data []byte) *posError {
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		msg := "invalid JSON"
		if err != nil {
			msg = "invalid JSON: " + err.Error()
		}
		return &posError{off: len(data), msg: msg}
	}
	off := int(se.Offset)
	msg := se.Error()
	switch {
	case strings.Contains(msg, "after top-level value"):
		// Offset points just past the offending byte.
		return &posError{off: max(off-1, 0), msg: "trailing data after the top-level value"}
	case strings.Contains(msg, "unexpected end of JSON input"):
		return &posError{off: len(data), msg: "unexpected end of file (truncated JSON?)"}
	}
	return &posError{off: max(off-1, 0), msg: "invalid JSON: " + msg}
}

// treeParser walks the tokens of a document already known to be valid.
type treeParser struct {
	dec  *json.Decoder
	data []byte
}

// start returns the offset of the next token, skipping the whitespace and
// the separator that may follow the previous one.
func (p *treeParser) start() int {
	off := int(p.dec.InputOffset())
	for off < len(p.data) {
		switch p.data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
			continue
		}
		break
	}
	return off
}

func (p *treeParser) value(path string) (*node, *posError) {
	off := p.start()
	tok, err := p.dec.Token()
	if err != nil {
		return nil, &posError{off: off, path: path, msg: "invalid JSON: " + err.Error()}
	}
	n := &node{off: off}
	switch t := tok.(type) {
	case nil:
		n.kind = kindNull
	case bool:
		n.kind, n.b = kindBool, t
	case json.Number:
		n.kind, n.num = kindNumber, t
	case string:
		n.kind, n.str = kindString, t
	case json.Delim:
		switch t {
		case '{':
			n.kind = kindObject
			seen := make(map[string]bool)
			for p.dec.More() {
				keyOff := p.start()
				kt, err := p.dec.Token()
				if err != nil {
					return nil, &posError{off: keyOff, path: path, msg: "invalid JSON: " + err.Error()}
				}
				key, _ := kt.(string)
				kpath := joinPath(path, key)
				if seen[key] {
					return nil, &posError{off: keyOff, path: kpath, msg: fmt.Sprintf("duplicate key %q", key)}
				}
				seen[key] = true
				v, perr := p.value(kpath)
				if perr != nil {
					return nil, perr
				}
				n.members = append(n.members, member{key: key, keyOff: keyOff, val: v})
			}
		case '[':
			n.kind = kindArray
			for i := 0; p.dec.More(); i++ {
				v, perr := p.value(fmt.Sprintf("%s[%d]", path, i))
				if perr != nil {
					return nil, perr
				}
				n.elems = append(n.elems, v)
			}
		}
		if _, err := p.dec.Token(); err != nil && err != io.EOF {
			return nil, &posError{off: p.start(), path: path, msg: "invalid JSON: " + err.Error()}
		}
	}
	return n, nil
}

// joinPath appends key to a dotted JSON path, quoting keys that are not
// plain identifiers.
func joinPath(path, key string) string {
	plain := key != ""
	for _, c := range key {
		if !(c == '_' || c == '-' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return fmt.Sprintf("%s[%q]", path, key)
	case path == "":
		return key
	}
	return path + "." + key
}

// lineCol converts a byte offset of data into a 1-based line and a 1-based
// column counted in characters.
func lineCol(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	before := data[:off]
	line = bytes.Count(before, []byte{'\n'}) + 1
	start := bytes.LastIndexByte(before, '\n') + 1
	return line, utf8.RuneCount(before[start:]) + 1
}

// member returns the value of key in object n, nil when n is not an object
// or has no such key.
func (n *node) member(key string) *node {
	if n == nil || n.kind != kindObject {
		return nil
	}
	for _, m := range n.members {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// format writes the tree as indented JSON without HTML escaping: objects one
// key per line, arrays of scalars on one line.
func (n *node) format() []byte {
	var buf bytes.Buffer
	n.write(&buf, "")
	buf.WriteByte('\n')
	return buf.Bytes()
}

func (n *node) write(buf *bytes.Buffer, indent string) {
	switch n.kind {
	case kindNull:
		buf.WriteString("null")
	case kindBool:
		fmt.Fprint(buf, n.b)
	case kindNumber:
		buf.WriteString(n.num.String())
	case kindString:
		writeString(buf, n.str)
	case kindArray:
		if len(n.elems) == 0 {
			buf.WriteString("[]")
			return
		}
		scalars := true
		for _, e := range n.elems {
			scalars = scalars && e.kind != kindArray && e.kind != kindObject
		}
		buf.WriteByte('[')
		for i, e := range n.elems {
			if i > 0 {
				buf.WriteByte(',')
			}
			if scalars {
				if i > 0 {
					buf.WriteByte(' ')
				}
			} else {
				buf.WriteString("\n" + indent + "  ")
			}
			e.write(buf, indent+"  ")
		}
		if !scalars {
			buf.WriteString("\n" + indent)
		}
		buf.WriteByte(']')
	case kindObject:
		if len(n.members) == 0 {
			buf.WriteString("{}")
			return
		}
		buf.WriteByte('{')
		for i, m := range n.members {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString("\n" + indent + "  ")
			writeString(buf, m.key)
			buf.WriteString(": ")
			m.val.write(buf, indent+"  ")
		}
		buf.WriteString("\n" + indent + "}")
	}
}

// writeString writes s as a JSON string, leaving <, > and & as they are.
func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	buf.Truncate(buf.Len() - 1)
}
