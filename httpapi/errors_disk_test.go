package httpapi

import (
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestStorageFullNamesTheFileSystem checks that a write refused for a full
// disk or an exhausted quota maps to 507 storage_full naming the file and
// the file system holding it.
func TestStorageFullNamesTheFileSystem(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "trusted.json")
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		err := fmt.Errorf("write trust: %w", &fs.PathError{Op: "write", Path: file, Err: errno})
		e := errorFor(err)
		if e.Status != http.StatusInsufficientStorage || e.Code != CodeStorageFull {
			t.Errorf("errorFor(%v) = %d %s; want 507 storage_full", err, e.Status, e.Code)
		}
		if !strings.Contains(e.Message, "the disk holding "+file+" (the file system mounted at ") {
			t.Errorf("errorFor(%v) message = %q; want the file and its file system named", err, e.Message)
		}
	}
}
