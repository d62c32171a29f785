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

// setupFile is the JSON shape of a setup file.
type setupFile struct {
	Version *int            `json:"version"`
	Copy    []string        `json:"copy"`
	Setup   *setupFileSetup `json:"setup"`
}

type setupFileSetup struct {
	Command []string `json:"command"`
	Timeout string   `json:"timeout"`
}

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
		return Setup{}, fmt.Errorf("%w: %s: %w", ErrSetupConfig, file, err)
	}
	s.File = file
	return s, nil
}

// ParseSetup parses the content of a setup file strictly: unknown fields,
// trailing data, an empty command, a pattern that is absolute, not clean,
// leaves the repository or names .git, and a timeout that is not a
// positive duration up to MaxSetupTimeout are errors.
func ParseSetup(data []byte) (Setup, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f setupFile
	if err := dec.Decode(&f); err != nil {
		return Setup{}, jsonPosError(data, err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		for end < int64(len(data)) && strings.IndexByte(" \t\r\n", data[end]) >= 0 {
			end++
		}
		return Setup{}, fmt.Errorf("%s: unexpected data after the JSON object", posOf(data, end))
	}
	if f.Version != nil && *f.Version != setupVersion {
		return Setup{}, fmt.Errorf("version: %d is not supported (want %d)", *f.Version, setupVersion)
	}
	var s Setup
	for i, p := range f.Copy {
		if err := checkCopyPattern(p); err != nil {
			return Setup{}, fmt.Errorf("copy[%d]: %q: %w", i, p, err)
		}
		s.Copy = append(s.Copy, p)
	}
	if f.Setup != nil {
		if len(f.Setup.Command) == 0 {
			return Setup{}, errors.New(`setup.command: must be a non-empty array of strings, e.g. ["sh", "-c", "npm ci"]`)
		}
		if f.Setup.Command[0] == "" {
			return Setup{}, errors.New("setup.command[0]: the program must not be empty")
		}
		s.Command = f.Setup.Command
		s.Timeout = DefaultSetupTimeout
		if f.Setup.Timeout != "" {
			d, err := time.ParseDuration(f.Setup.Timeout)
			if err != nil {
				return Setup{}, fmt.Errorf("setup.timeout: %q is not a duration such as \"5m\" or \"90s\"", f.Setup.Timeout)
			}
			if d <= 0 || d > MaxSetupTimeout {
				return Setup{}, fmt.Errorf("setup.timeout: %s is not within (0, %s]", d, MaxSetupTimeout)
			}
			s.Timeout = d
		}
	}
	return s, nil
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

// jsonPosError adds the line and column to a decoding error.
func jsonPosError(data []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("%s: %w", posOf(data, se.Offset), err)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return fmt.Errorf("%s: %s: want %s, got JSON %s", posOf(data, te.Offset), field, te.Type, te.Value)
	case errors.Is(err, io.EOF):
		return errors.New("empty file: want a JSON object")
	}
	return err // unknown field: the message names it
}

// posOf returns "line L, column C" of byte offset off in data.
func posOf(data []byte, off int64) string {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}
