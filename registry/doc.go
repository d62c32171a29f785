// Package registry decides which agents can be launched. It merges the
// built-in providers (claude, codex, gemini, qwen, opencode, goose, copilot
// over ACP; claude-cli and aider through a PTY; and the demo agent) with the
// entries of a providers.json file, loaded strictly: an unknown field, a
// wrong type, trailing data or a bad version rejects the whole file with
// diagnostics naming the JSON path and line:column, and the last good
// config stays in force. A Config.Trust check, run before every read, lets
// the daemon refuse in the same way a file that another user could have
// written.
//
// Run watches the file and applies every edit within a debounce period,
// publishing each change to subscribers as a diff. Resolve turns a provider
// id into a launch Spec with its program looked up in PATH, its sandbox
// policy (Landlock paths and network ports) resolved, and the variables of
// the daemon's environment its agent gets named: the provider's
// "pass_env" (a built-in's lists those its agent reads) and those its
// agent's env_var login methods name (Spec.AuthEnv). Patch edits one
// provider's entry with a JSON Merge Patch, guarded by an ETag. Probe asks
// an injected Prober what an agent offers, and caches the answer.
package registry
