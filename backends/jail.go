package backends

import (
	"os"
	"os/exec"
)

// Jail confines one process and everything it starts: a cgroup of its own
// (or, where none can be made, a marked process tree the daemon adopts as
// subreaper) and, optionally, Landlock rules applied by a launcher that
// execs the program.
//
// Prepare rewrites an unstarted cmd so that it starts inside the jail: it
// may replace cmd.Path and cmd.Args (the launcher), add to cmd.Env and set
// fields of cmd.SysProcAttr (which the caller has already set). Kill
// SIGKILLs every process in the jail, whatever its session or process
// group, and waits until none is left or the wait bound passes. Release
// kills what is left and removes the jail; it is idempotent. Describe says
// how the process is confined, for events and listings.
type Jail interface {
	Prepare(cmd *exec.Cmd) error
	Kill() error
	Release() error
	Describe() Confinement
}

// Confinement says how a process is confined.
type Confinement struct {
	// Containment is "cgroup" (a cgroup v2 of its own), "subreaper" (the
	// daemon adopts its orphans and sweeps its marked descendants) or ""
	// (process group only).
	Containment string `json:"containment"`
	// Cgroup is the cgroup's path under the cgroup2 mount, when there is one.
	Cgroup string `json:"cgroup,omitempty"`
	// Landlock is the ABI version the rules were applied with, 0 when the
	// process runs without Landlock.
	Landlock int `json:"landlock"`
	// Namespaces reports whether the process runs in namespaces of its
	// own: its own view of the files, its own processes, and a network
	// namespace whose only way out is the daemon's egress proxy.
	Namespaces bool `json:"namespaces"`
	// Network is the network mode in force ("all" without Landlock net rules).
	Network string `json:"network,omitempty"`
	// Warning says what protection is missing and why, if any.
	Warning string `json:"warning,omitempty"`
}

// Prestart is a process a jail started ahead of its program (a launcher
// waiting for it), and the daemon's ends of its stdio pipes.
type Prestart struct {
	Cmd                   *exec.Cmd
	Stdin, Stdout, Stderr *os.File
}

// A PrestartJail is a Jail that may have started its launcher early.
// TakePrestart, called with the command Prepare rewrote, gives that
// command to the waiting launcher and returns the launcher's process,
// which runs it in its place; ok is false when there is none (the command
// is then started as usual).
type PrestartJail interface {
	Jail
	TakePrestart(cmd *exec.Cmd) (Prestart, bool)
}
