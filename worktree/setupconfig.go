package worktree

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// SetupFileName is the name of a repository's worktree setup file, read
// from the top of the main checkout's working tree (committed or not).
const SetupFileName = ".agentpool.json"

// Bounds and defaults of a setup file.
const (
	// DefaultSetupTimeout bounds a setup command whose file gives no
	// timeout.
	DefaultSetupTimeout = 10 * time.Minute
	// MaxSetupTimeout is the longest timeout a setup file may ask for.
	MaxSetupTimeout = 2 * time.Hour
	// maxSetupFile bounds what is read of a setup file.
	maxSetupFile = 1 << 20
	// setupVersion is the only version a setup file may declare.
	setupVersion = 1
)

// ErrSetupConfig is returned (wrapped, with the file, the position and
// what is wrong) when a repository's setup file cannot be used.
var ErrSetupConfig = errors.New("invalid worktree setup file")

// Setup is a repository's worktree setup: what Create's worktree gets
// before its session's agents work in it.
type Setup struct {
	// File is the setup file read; "" when the repository has none.
	File string `json:"file,omitempty"`
	// Copy lists paths or glob patterns (path.Match syntax, "/"-separated,
	// relative to the top of the repository) of files in the main
	// checkout to copy into each new worktree: untracked files such as
	// .env. A directory is copied with everything in it.
	Copy []string `json:"copy,omitempty"`
	// Command is run in each new worktree after the copy, as argv (no
	// shell unless it names one); nil for none.
	Command []string `json:"command,omitempty"`
	// Timeout bounds Command (default DefaultSetupTimeout).
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Empty reports whether s asks for nothing.
func (s Setup) Empty() bool { return len(s.Copy) == 0 && len(s.Command) == 0 }

// LoadSetup reads the setup file at the top of the working tree top, once,
// not through a symbolic link, a regular file of at most 1 MiB. A missing
// file gives a zero Setup and no error. Anything else that is not a valid
// setup file is an error wrapping ErrSetupConfig that names the file and,
// for a syntax or type error, the line and column. It does not say
// whether the file is trusted: Create and PrepareSetup do.
func LoadSetup(top string) (Setup, error) {
	data, file, ok, err := readSetupFile(top)
	if err != nil || !ok {
		return Setup{}, err
	}
	s, err := ParseSetup(data)
	if err != nil {
		return Setup{}, setupFileError(file, err)
	}
	s.File = file
	return s, nil
}

// setupFileError is the error of the setup file that ParseSetup refused
// with err: ErrSetupConfig, with a message for the user that names the
// file and each problem's line and column.
func setupFileError(file string, err error) error {
	return &userError{msg: "invalid setup file " + file + ": " + err.Error(), err: fmt.Errorf("%w: %s: %w", ErrSetupConfig, file, err)}
}

// ParseSetup parses the content of a setup file strictly: unknown fields,
// duplicate keys, trailing data, values of the wrong type, an empty
// command, a pattern that is absolute, not clean, leaves the repository or
// names .git, and a timeout that is not a positive duration up to
// MaxSetupTimeout are errors. It reports every problem it finds (at most
// 20) in a *SetupFileError, each with its line and column; a syntax error
// is reported alone, as nothing after it can be read.
func ParseSetup(data []byte) (Setup, error) {
	ps := &problems{data: data}
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		off, msg := syntaxProblem(data, err)
		ps.add(off, "", "%s", msg)
		return Setup{}, ps.result()
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		for end < int64(len(data)) && strings.IndexByte(" \t\r\n", data[end]) >= 0 {
			end++
		}
		ps.add(int(end), "", "unexpected data after the JSON object")
	}
	root, err := parseJSONTree(data)
	if err != nil { // cannot happen: the value decoded above
		ps.add(0, "", "invalid JSON: %v", err)
		return Setup{}, ps.result()
	}
	s := setupOf(root, ps)
	if err := ps.result(); err != nil {
		return Setup{}, err
	}
	return s, nil
}

// setupOf reads the setup of the document root, adding its problems to ps.
func setupOf(root *jsonNode, ps *problems) Setup {
	var s Setup
	if root.kind != jsonObject {
		ps.add(root.off, "", "want a JSON object such as {\"copy\": [\".env\"]}, got %s", root.kind)
		return s
	}
	for _, m := range members(root, "", ps) {
		switch m.key {
		case "version":
			if v, err := m.val.num.Int64(); m.val.kind != jsonNumber || err != nil || v != setupVersion {
				ps.add(m.val.off, "version", "%s is not supported (want %d)", describe(m.val), setupVersion)
			}
		case "copy":
			s.Copy = copyOf(m.val, ps)
		case "setup":
			if m.val.kind != jsonNull {
				s.Command, s.Timeout = commandOf(m.val, ps)
			}
		default:
			ps.add(m.off, "", "unknown field %q (want version, copy or setup)", m.key)
		}
	}
	return s
}

// members returns the members of object n, reporting duplicate keys.
func members(n *jsonNode, path string, ps *problems) []jsonMember {
	seen := map[string]bool{}
	out := make([]jsonMember, 0, len(n.members))
	for _, m := range n.members {
		if seen[m.key] {
			ps.add(m.off, jsonPath(path, m.key), "duplicate key")
			continue
		}
		seen[m.key] = true
		out = append(out, m)
	}
	return out
}

// copyOf reads the copy list.
func copyOf(n *jsonNode, ps *problems) []string {
	if n.kind != jsonArray {
		ps.add(n.off, "copy", "want an array of strings such as [\".env\"], got %s", n.kind)
		return nil
	}
	var out []string
	for i, e := range n.elems {
		path := fmt.Sprintf("copy[%d]", i)
		if e.kind != jsonString {
			ps.add(e.off, path, "want a string, got %s", e.kind)
			continue
		}
		if err := checkCopyPattern(e.str); err != nil {
			ps.add(e.off, path, "%q: %v", e.str, err)
			continue
		}
		out = append(out, e.str)
	}
	return out
}

// commandOf reads the setup object: its command and timeout.
func commandOf(n *jsonNode, ps *problems) ([]string, time.Duration) {
	if n.kind != jsonObject {
		ps.add(n.off, "setup", "want an object such as {\"command\": [\"make\"]}, got %s", n.kind)
		return nil, 0
	}
	var cmd []string
	timeout := DefaultSetupTimeout
	hasCommand := false
	for _, m := range members(n, "setup", ps) {
		switch m.key {
		case "command":
			hasCommand = true
			if m.val.kind != jsonArray || len(m.val.elems) == 0 {
				ps.add(m.val.off, "setup.command", `must be a non-empty array of strings, e.g. ["sh", "-c", "npm ci"]`)
				continue
			}
			for i, e := range m.val.elems {
				switch {
				case e.kind != jsonString:
					ps.add(e.off, fmt.Sprintf("setup.command[%d]", i), "want a string, got %s", e.kind)
				case i == 0 && e.str == "":
					ps.add(e.off, "setup.command[0]", "the program must not be empty")
				default:
					cmd = append(cmd, e.str)
				}
			}
		case "timeout":
			if m.val.kind != jsonString {
				ps.add(m.val.off, "setup.timeout", "want a duration string such as \"5m\", got %s", m.val.kind)
				continue
			}
			d, err := time.ParseDuration(m.val.str)
			switch {
			case err != nil:
				ps.add(m.val.off, "setup.timeout", "%q is not a duration such as \"5m\" or \"90s\"", m.val.str)
			case d <= 0 || d > MaxSetupTimeout:
				ps.add(m.val.off, "setup.timeout", "%s is not within (0, %s]", d, MaxSetupTimeout)
			default:
				timeout = d
			}
		default:
			ps.add(m.off, "setup", "unknown field %q (want command or timeout)", m.key)
		}
	}
	if !hasCommand {
		ps.add(n.off, "setup.command", `missing: must be a non-empty array of strings, e.g. ["sh", "-c", "npm ci"]`)
	}
	return cmd, timeout
}

// describe is a value as a problem quotes it.
func describe(n *jsonNode) string {
	switch n.kind {
	case jsonNumber:
		return n.num.String()
	case jsonString:
		return fmt.Sprintf("%q", n.str)
	}
	return string(n.kind)
}

// jsonPath is path.key, or key at the top.
func jsonPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// checkCopyPattern rejects a copy pattern that could name something
// outside the repository or inside its .git.
func checkCopyPattern(p string) error {
	switch {
	case p == "":
		return errors.New("empty")
	case strings.ContainsRune(p, 0):
		return errors.New("contains a NUL byte")
	case strings.HasPrefix(p, "/"):
		return errors.New("absolute: patterns are relative to the top of the repository")
	case strings.Contains(p, `\`):
		return errors.New(`contains "\": use "/" to separate directories, and no escapes`)
	case p != path.Clean(p) || p == ".":
		return errors.New("not a clean path (no \".\", \"..\", \"//\" or trailing \"/\")")
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return errors.New("leaves the repository")
		}
		if strings.EqualFold(c, ".git") {
			return errors.New("names .git")
		}
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("bad pattern: %w", err)
	}
	return nil
}

// syntaxProblem is where a document that does not decode goes wrong,
// and how.
func syntaxProblem(data []byte, err error) (int, string) {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return int(se.Offset), err.Error()
	case errors.Is(err, io.EOF):
		return 0, "empty file: want a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return len(data), "unexpected end of file (truncated JSON?)"
	}
	return 0, err.Error()
}
