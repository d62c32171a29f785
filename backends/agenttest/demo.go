package agenttest

import (
	"encoding/json"
	"os"
	"runtime"
)

// DemoFile is the file the demo agent writes in the session's worktree.
const DemoFile = "AGENTPOOL_DEMO.md"

// DemoScript is the built-in demo agent: on every prompt it reads README.md,
// asks permission to edit, and when allowed writes DemoFile with the prompt.
// It supports session/load so a restarted daemon resumes its sessions.
func DemoScript() Script {
	return Script{
		AgentName:   "agentpool-demo",
		LoadSession: true,
		Modes:       []Mode{{ID: "default", Name: "Default"}, {ID: "plan", Name: "Plan"}},
		Turns: []Turn{{
			Steps: []Step{
				{Thought: "Looking at the repository first."},
				{ToolCall: &ToolCall{ID: "read-1", Title: "Read README.md", Kind: "read", Status: "in_progress", Locations: []string{"README.md"}}},
				{Read: &FileOp{Path: "README.md", Limit: intp(5)}},
				{ToolUpdate: &ToolCall{ID: "read-1", Status: "completed"}},
				{Chunk: "I read the top of README.md. I would like to write " + DemoFile + " with your request.\n"},
				{ToolCall: &ToolCall{ID: "edit-1", Title: "Write " + DemoFile, Kind: "edit", Status: "pending", Locations: []string{DemoFile}}},
				{Permission: &Permission{
					ToolCall: ToolCall{ID: "edit-1", Title: "Write " + DemoFile, Kind: "edit", Locations: []string{DemoFile}},
					Allowed: []Step{
						{Write: &FileOp{Path: DemoFile, Content: "# Written by the agentpool demo agent\n\nYou asked:\n\n> {{prompt}}\n"}},
						{ToolUpdate: &ToolCall{ID: "edit-1", Status: "completed"}},
						{Chunk: "Done: " + DemoFile + " is in your session's worktree.\n"},
					},
					Rejected: []Step{
						{ToolUpdate: &ToolCall{ID: "edit-1", Status: "failed"}},
						{Chunk: "Permission refused: nothing was written.\n"},
					},
				}},
			},
		}},
	}
}

// RunDemo runs the demo agent on the process's standard streams. A script
// in AGENTPOOL_DEMO_SCRIPT (JSON) replaces the built-in one.
func RunDemo() error {
	// The demo agent's work is serial: one processor spares the machine
	// the runtime's idle threads waking each other (see BenchmarkCluster).
	runtime.GOMAXPROCS(1)
	s := DemoScript()
	if raw := os.Getenv("AGENTPOOL_DEMO_SCRIPT"); raw != "" {
		s = Script{}
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			return err
		}
	}
	return Run(s, os.Stdin, os.Stdout, os.Stderr)
}

func intp(i int) *int { return &i }
