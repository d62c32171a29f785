package main

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// versionText is what `agentpool version` prints: the version (the one set
// at link time, else the module's when the binary was installed from a
// tagged module), then the source revision (what the build recorded of
// the source control state, else rev, the one set at link time, which
// make build sets even when -buildvcs=false keeps Go from recording it),
// commit time and uncommitted changes, and the Go version. bi is
// debug.ReadBuildInfo's, nil when the binary carries none.
func versionText(v, rev string, bi *debug.BuildInfo) string {
	if bi != nil && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	var b strings.Builder
	fmt.Fprintf(&b, "agentpool %s\n", v)
	settings := map[string]string{}
	if bi != nil {
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	modified := settings["vcs.modified"] == "true"
	if r := settings["vcs.revision"]; r != "" {
		rev = r
	} else if rev != "" {
		modified = strings.HasSuffix(v, "-dirty") // git describe --dirty
	}
	if rev != "" {
		if modified {
			rev += " (modified: uncommitted changes were built)"
		}
		fmt.Fprintf(&b, "  revision  %s\n", rev)
	}
	if bi == nil {
		return b.String()
	}
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "  committed %s\n", t)
	}
	if bi.GoVersion != "" {
		fmt.Fprintf(&b, "  go        %s\n", bi.GoVersion)
	}
	return b.String()
}

// buildInfo is debug.ReadBuildInfo's answer, nil when there is none.
func buildInfo() *debug.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return bi
}
