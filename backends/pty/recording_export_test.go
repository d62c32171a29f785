package pty

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Recording is the raw terminal traffic of one run of a terminal program:
// what it wrote (Out) and what was typed into it (In), in order, with the
// milliseconds since the previous step. Recordings of the real programs
// are made by TestRecordClaude (make test-real); hand-made ones say so in
// Source.
type Recording struct {
	// Program and Version name what was recorded.
	Program string `json:"program"`
	Version string `json:"version"`
	// Source is "real" for a recording of the program itself, otherwise
	// how it was made.
	Source string   `json:"source"`
	Args   []string `json:"args,omitempty"`
	Cols   int      `json:"cols"`
	Rows   int      `json:"rows"`
	Steps  []Step   `json:"steps"`
}

// Step is one read from or one write to the terminal.
type Step struct {
	MS int `json:"ms"`
	// Out is what the program wrote; In what was typed.
	Out []byte `json:"out,omitempty"`
	In  []byte `json:"in,omitempty"`
	// Wait, on an In step, is the key a replay waits for before it goes
	// on: the input's last key that the program acted on.
	Wait []byte `json:"wait,omitempty"`
	// Note says what the step is ("prompt", "cancel", "clear").
	Note string `json:"note,omitempty"`
	// Text, on a prompt, is the prompt as the daemon would send it.
	Text string `json:"text,omitempty"`
}

// LoadRecording reads a recording.
func LoadRecording(path string) (*Recording, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Recording
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("recording %s: %w", path, err)
	}
	return &r, nil
}

// Save writes the recording as indented JSON.
func (r *Recording) Save(path string) error {
	data, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// RecordingFiles lists the recordings in testdata/recordings.
func RecordingFiles() ([]string, error) {
	files, err := filepath.Glob(filepath.Join("testdata", "recordings", "*.json"))
	sort.Strings(files)
	return files, err
}
