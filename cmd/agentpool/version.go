package main

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// versionText is what `agentpool version` prints: the version (the one set
// at link time, else the module's when the binary was installed from a
// tagged module), then what the build recorded of the source control state
// (revision, commit time, uncommitted changes) and the Go version. bi is
// debug.ReadBuildInfo's, nil when the binary carries none.
func versionText(v string, bi *debug.BuildInfo) string {
	if bi != nil && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	var b strings.Builder
	fmt.Fprintf(&b, "agentpool %s\n", v)
	if bi == nil {
		return b.String()
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if settings["vcs.modified"] == "true" {
			rev += " (modified: uncommitted changes were built)"
		}
		fmt.Fprintf(&b, "  revision  %s\n", rev)
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
