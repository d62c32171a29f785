package agenttest

import (
	"errors"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// SysResult is the outcome of a Sys step, as the agent reports it in the
// text of an agent_message_chunk:
//
//	sys <op> <status>[ <detail>]
//
// <op> is the SysOp's Op. <status> is one word: "ok"; the name of the errno
// the operation failed with ("EACCES", "ECONNREFUSED", "ENOENT", as
// unix.ErrnoName spells it, or "errno<N>" for one without a name); or
// "error" for a failure that carries no errno. The detail is everything
// after the single space that follows the status, verbatim (it may hold
// spaces and newlines). On failure it is the error's text; on success:
//
//	write, mkdir, remove, rename, connect   (none)
//	read                                    the first 64 bytes read
//	talk                                    the first 1024 bytes the peer sent
//	exec                                    exit=<code>[ <first 256 bytes of stdout+stderr>]
//	env                                     the variables found, "NAME=value", one a line
//	setsid_child, daemon                    pid=<pid> start=<starttime>
//
// An exec whose command ran is "ok" whatever its exit code (-1 when a
// signal ended it); only a command that could not be started fails.
// <starttime> is field 22 of /proc/<pid>/stat, as in a pid file.
type SysResult struct {
	// Op is the operation ("write", "connect", ...).
	Op string
	// Status is "ok", an errno name such as "EACCES", or "error".
	Status string
	// Detail is the text after the status, verbatim.
	Detail string

	// The fields below are filled by ParseSysResult from Detail and
	// ignored by String.

	// Exit is the exit code of a successful exec (-1 otherwise).
	Exit int
	// Data is what a successful read read, exec printed or talk heard
	// (truncated), or the variables env found.
	Data string
	// Proc is the process a successful setsid_child or daemon started.
	Proc PidEntry
}

// Statuses of a SysResult that are not errno names.
const (
	SysOK    = "ok"
	SysError = "error"
)

// sysPrefix starts every Sys result text.
const sysPrefix = "sys "

// OK reports whether the operation succeeded.
func (r SysResult) OK() bool { return r.Status == SysOK }

// String formats r as the agent reports it; ParseSysResult reverses it.
func (r SysResult) String() string {
	s := sysPrefix + r.Op + " " + r.Status
	if r.Detail != "" {
		s += " " + r.Detail
	}
	return s
}

// ParseSysResult parses the text of a Sys step's agent_message_chunk. It
// returns false when text is not a Sys result.
func ParseSysResult(text string) (SysResult, bool) {
	rest, ok := strings.CutPrefix(text, sysPrefix)
	if !ok {
		return SysResult{}, false
	}
	op, rest, _ := strings.Cut(rest, " ")
	status, detail, _ := strings.Cut(rest, " ")
	if !isWord(op) || !isWord(status) {
		return SysResult{}, false
	}
	r := SysResult{Op: op, Status: status, Detail: detail, Exit: -1}
	if !r.OK() {
		return r, true
	}
	switch op {
	case OpRead, OpEnv, OpTalk:
		r.Data = detail
	case OpExec:
		code, out, _ := strings.Cut(detail, " ")
		n, err := strconv.Atoi(strings.TrimPrefix(code, "exit="))
		if !strings.HasPrefix(code, "exit=") || err != nil {
			return SysResult{}, false
		}
		r.Exit, r.Data = n, out
	case OpSetsidChild, OpDaemon:
		e, err := parsePidFields(detail)
		if err != nil {
			return SysResult{}, false
		}
		r.Proc = e
	}
	return r, true
}

// Env returns the variables a successful env step found, by name.
func (r SysResult) Env() map[string]string {
	out := map[string]string{}
	if r.Op != OpEnv || !r.OK() || r.Data == "" {
		return out
	}
	for _, kv := range strings.Split(r.Data, "\n") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// isWord reports whether s is a non-empty run of [A-Za-z0-9_].
func isWord(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// parsePidFields parses "pid=<pid> start=<starttime>".
func parsePidFields(s string) (PidEntry, error) {
	p, st, ok := strings.Cut(s, " ")
	p, ok1 := strings.CutPrefix(p, "pid=")
	st, ok2 := strings.CutPrefix(st, "start=")
	if !ok || !ok1 || !ok2 {
		return PidEntry{}, errors.New("want pid=<pid> start=<starttime>")
	}
	return parsePidEntry(p + " " + st)
}

// sysResult builds the result of op from its error: the errno's name, or
// "error" and the error's text.
func sysResult(op string, err error, detail string) SysResult {
	if err == nil {
		return SysResult{Op: op, Status: SysOK, Detail: detail}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		name := unix.ErrnoName(errno)
		if name == "" {
			name = "errno" + strconv.Itoa(int(errno))
		}
		return SysResult{Op: op, Status: name, Detail: err.Error()}
	}
	return SysResult{Op: op, Status: SysError, Detail: err.Error()}
}
