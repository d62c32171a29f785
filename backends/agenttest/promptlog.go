package agenttest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

// PromptBlock is one content block of a prompt as a PromptLog has it.
type PromptBlock struct {
	Type     string          `json:"type"`
	Text     string          `json:"text,omitempty"`
	Resource *PromptResource `json:"resource,omitempty"`
}

// PromptResource is an embedded resource of a prompt.
type PromptResource struct {
	URI      string `json:"uri"`
	MimeType string `json:"mimeType,omitempty"`
	Text     string `json:"text,omitempty"`
}

// ReadPromptLog reads a Script.PromptLog: the content blocks of each
// prompt the agent got, in order. A missing file is no prompt.
func ReadPromptLog(path string) ([][]PromptBlock, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]PromptBlock
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var blocks []PromptBlock
		if err := json.Unmarshal(sc.Bytes(), &blocks); err != nil {
			return nil, fmt.Errorf("prompt log %s line %d: %w", path, len(out)+1, err)
		}
		out = append(out, blocks)
	}
	return out, sc.Err()
}
