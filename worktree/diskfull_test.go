package worktree

import (
	"path/filepath"
	"testing"
)

// TestDiskFullNamesTheFileSystem: a path is looked up through its nearest
// existing parent, and a file system's mount point is its highest
// directory on the same device.
func TestDiskFullNamesTheFileSystem(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "not", "yet")
	if got := existingParent(missing); got != dir {
		t.Errorf("existingParent(%q) = %q; want %q", missing, got, dir)
	}
	if got := existingParent("relative"); got != "" {
		t.Errorf("existingParent(relative) = %q; want \"\"", got)
	}
	if got := mountPoint("/proc/self/fd"); got != "/proc" {
		t.Errorf("mountPoint(/proc/self/fd) = %q; want /proc", got)
	}
	if err := diskFull(missing); err != nil {
		t.Errorf("diskFull(%q) = %v; want nil (a temporary directory with room)", missing, err)
	}
}
