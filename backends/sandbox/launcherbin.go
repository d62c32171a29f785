package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
)

// LauncherBinary is the name of the launcher's own small binary
// (cmd/agentpool-sandbox), installed beside agentpool.
const LauncherBinary = "agentpool-sandbox"

// IdentityFlag makes the launcher binary print its LauncherIdentity.
const IdentityFlag = "--identity"

// LauncherIdentity names the build of this binary as far as the launcher
// is concerned: the Go toolchain, the version, revision and link flags
// the build recorded, and the shape of the Policy it reads (every field's
// name, type and JSON tag, recursively). Two binaries with the same
// identity read a policy the same way.
func LauncherIdentity() string {
	var b strings.Builder
	b.WriteString(runtime.Version())
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.WriteString(" " + bi.Main.Path + "@" + bi.Main.Version)
		for _, s := range bi.Settings {
			switch s.Key {
			case "-ldflags", "-tags", "CGO_ENABLED", "vcs.revision", "vcs.time", "vcs.modified":
				b.WriteString(" " + s.Key + "=" + s.Value)
			}
		}
	}
	sum := sha256.Sum256([]byte(typeShape(reflect.TypeOf(Policy{}), map[reflect.Type]bool{})))
	b.WriteString(" policy=" + hex.EncodeToString(sum[:8]))
	return b.String()
}

// typeShape describes t for LauncherIdentity.
func typeShape(t reflect.Type, seen map[reflect.Type]bool) string {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return t.Kind().String() + "(" + typeShape(t.Elem(), seen) + ")"
	case reflect.Map:
		return "map(" + typeShape(t.Key(), seen) + "," + typeShape(t.Elem(), seen) + ")"
	case reflect.Struct:
		if seen[t] {
			return t.String()
		}
		seen[t] = true
		var b strings.Builder
		b.WriteString(t.String() + "{")
		for i := range t.NumField() {
			f := t.Field(i)
			b.WriteString(f.Name + " " + string(f.Tag) + " " + typeShape(f.Type, seen) + ";")
		}
		return b.String() + "}"
	}
	return t.String()
}

// LauncherNextTo returns the launcher to start confined processes with
// for the daemon whose binary is self: the small launcher binary when it
// lies beside self's real path, is a regular file that only self's owner
// may change, in a directory where no one else may replace it, and
// reports the same LauncherIdentity as this binary;
// otherwise self with LauncherCommand, and why the small one was not
// taken ("" when there is none).
func LauncherNextTo(self string) (launcher []string, why string) {
	own := []string{self, LauncherCommand}
	real, err := filepath.EvalSymlinks(self)
	if err != nil {
		return own, ""
	}
	path := filepath.Join(filepath.Dir(real), LauncherBinary)
	fi, err := os.Lstat(path)
	if os.IsNotExist(err) {
		return own, ""
	}
	if err != nil {
		return own, err.Error()
	}
	sfi, err := os.Stat(real)
	if err != nil {
		return own, err.Error()
	}
	dfi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return own, err.Error()
	}
	st, sst := fi.Sys().(*syscall.Stat_t), sfi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return own, path + " is not a regular file"
	case fi.Mode().Perm()&0o022 != 0:
		return own, fmt.Sprintf("%s may be changed by others (mode %v)", path, fi.Mode().Perm())
	case st == nil || sst == nil || st.Uid != sst.Uid:
		return own, path + " has another owner than " + real
	case dfi.Mode().Perm()&0o022 != 0 && dfi.Mode()&os.ModeSticky == 0:
		// Another user could put a file of theirs in its place between
		// this check and any later launch.
		return own, fmt.Sprintf("%s lies in a directory others may change (mode %v)", path, dfi.Mode())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, IdentityFlag)
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		return own, fmt.Sprintf("%s %s: %v", path, IdentityFlag, err)
	}
	if got, want := strings.TrimSpace(string(out)), LauncherIdentity(); got != want {
		return own, fmt.Sprintf("%s is from another build (%s; this daemon is %s): reinstall both from one build (make build)", path, got, want)
	}
	return []string{path}, ""
}
