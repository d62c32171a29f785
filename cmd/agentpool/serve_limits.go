package main

import (
	"log/slog"
	"syscall"
)

// fileLimit returns the daemon's open file limit (the soft RLIMIT_NOFILE),
// which sizes the API's connection caps, or 0 if it cannot be read.
//
// It only reads the limit. The Go runtime has raised it at start already,
// to one below the hard limit, and gives each child it starts the original
// soft limit back, so agents keep the limit the user gave the daemon (some
// programs still use select and need it low). Setting the limit here, with
// setrlimit or prlimit, would turn that restoration off and hand the
// raised limit down to every agent.
func fileLimit(log *slog.Logger) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("read the open file limit", "err", err)
		return 0
	}
	log.Debug("open file limit", "soft", lim.Cur, "hard", lim.Max)
	return int(min(lim.Cur, 1<<30))
}
