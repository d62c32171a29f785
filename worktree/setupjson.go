package worktree

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// maxSetupProblems bounds the problems a setup file's error lists; the
// rest are counted.
const maxSetupProblems = 20

// SetupProblem is one problem of a setup file, where it is.
type SetupProblem struct {
	// Line and Col are 1-based; Col counts bytes.
	Line, Col int
	// Path is the JSON path of the value ("copy[1]", "setup.timeout"), ""
	// for the document itself.
	Path string
	// Msg says what is wrong.
	Msg string
}

// String is "line L, column C: path: message".
func (p SetupProblem) String() string {
	s := fmt.Sprintf("line %d, column %d: ", p.Line, p.Col)
	if p.Path != "" {
		s += p.Path + ": "
	}
	return s + p.Msg
}

// SetupFileError lists every problem found in a setup file (at most
// maxSetupProblems of them; More counts the others). ParseSetup returns
// it for any file it refuses.
type SetupFileError struct {
	Problems []SetupProblem
	More     int
}

// Error lists the problems, separated by "; ".
func (e *SetupFileError) Error() string {
	parts := make([]string, 0, len(e.Problems)+1)
	for _, p := range e.Problems {
		parts = append(parts, p.String())
	}
	if e.More > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", e.More))
	}
	return strings.Join(parts, "; ")
}

// problems collects the problems of one document, with their positions.
type problems struct {
	data []byte
	err  SetupFileError
}

// add records a problem of the value at byte offset off.
func (ps *problems) add(off int, path, format string, args ...any) {
	if len(ps.err.Problems) == maxSetupProblems {
		ps.err.More++
		return
	}
	line, col := lineCol(ps.data, int64(off))
	ps.err.Problems = append(ps.err.Problems, SetupProblem{Line: line, Col: col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// result is the collected problems as an error, nil when there were none.
func (ps *problems) result() error {
	if len(ps.err.Problems) == 0 {
		return nil
	}
	return &ps.err
}

// jsonKind names a JSON value's type the way the problems do.
type jsonKind string

const (
	jsonObject jsonKind = "an object"
	jsonArray  jsonKind = "an array"
	jsonString jsonKind = "a string"
	jsonNumber jsonKind = "a number"
	jsonBool   jsonKind = "a boolean"
	jsonNull   jsonKind = "null"
)

// jsonNode is one JSON value with the byte offset where it starts.
type jsonNode struct {
	off     int
	kind    jsonKind
	str     string
	num     json.Number
	members []jsonMember
	elems   []*jsonNode
}

// jsonMember is one key of an object, with the offset of the key.
type jsonMember struct {
	key string
	off int
	val *jsonNode
}

// jsonTree parses the first JSON value of data, which the caller has
// checked is valid, keeping where each value starts.
type jsonTree struct {
	dec  *json.Decoder
	data []byte
}

func parseJSONTree(data []byte) (*jsonNode, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return (&jsonTree{dec: dec, data: data}).value()
}

// start is the offset of the next token: past white space and the
// separator that may follow the previous token.
func (p *jsonTree) start() int {
	off := int(p.dec.InputOffset())
	for off < len(p.data) && strings.IndexByte(" \t\r\n,:", p.data[off]) >= 0 {
		off++
	}
	return off
}

func (p *jsonTree) value() (*jsonNode, error) {
	n := &jsonNode{off: p.start()}
	tok, err := p.dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			n.kind = jsonObject
			for p.dec.More() {
				off := p.start()
				k, err := p.dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				key, _ := k.(string)
				n.members = append(n.members, jsonMember{key: key, off: off, val: v})
			}
		} else {
			n.kind = jsonArray
			for p.dec.More() {
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, v)
			}
		}
		if _, err := p.dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
	case string:
		n.kind, n.str = jsonString, t
	case json.Number:
		n.kind, n.num = jsonNumber, t
	case bool:
		n.kind = jsonBool
	default:
		n.kind = jsonNull
	}
	return n, nil
}

// lineCol returns the 1-based line and column of byte offset off in data.
func lineCol(data []byte, off int64) (int, int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	return bytes.Count(before, []byte("\n")) + 1, int(off) - bytes.LastIndexByte(before, '\n')
}
