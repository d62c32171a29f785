// Package attempts runs one prompt as several sessions side by side: every
// session starts on the same base commit, all are prompted together, an
// optional check command runs in each worktree after its turn, and the
// user compares them (stop reason, time, usage, files and lines changed,
// the check's result) and picks one to merge, the others being closed.
package attempts
