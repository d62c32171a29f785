package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Modes of what the daemon keeps: only its user may read them. Existing
// ones with more bits are narrowed to these at start.
const (
	privateDirMode  fs.FileMode = 0o700
	privateFileMode fs.FileMode = 0o600
)

// Suffixes of the files SQLite and the store keep beside the database.
const (
	walSuffix  = "-wal"
	shmSuffix  = "-shm"
	lockSuffix = ".lock" // the store's flock file (store.lockSuffix)
)

// secureHome makes the data directory home, and what the daemon reads and
// writes in it, its user's alone before anything there is read: home, the
// worktrees root and the tmp directory are created 0700, an existing
// one of the user's with a wider mode is narrowed to 0700 (logged);
// providers.json, daemon.json, the cgroup file, trusted.json,
// page-sessions.json and the database files
// (the database is created 0600 here, before SQLite opens it, so that its
// -wal and -shm, which SQLite gives the database's mode, are 0600 too) are
// narrowed to 0600 when they exist. The token is checked like them but
// not narrowed (see LoadOrCreateToken). Anything owned by
// another user, writable by group or others and not the user's to
// narrow, or reached through a directory or symlink that another user
// controls (see trustChecker), is refused with an error that says why and
// what to do.
func (m *Main) secureHome(home string) error {
	if err := m.secure(home, privateDirMode, true); err != nil {
		return fmt.Errorf("data directory: %w; or choose another data directory with --home or $AGENTPOOL_HOME", err)
	}
	// The token is checked but never narrowed: one that others could read
	// may have leaked, and LoadOrCreateToken refuses it, saying to replace
	// it.
	token := filepath.Join(home, tokenFileName)
	if _, err := checkTrusted(token); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return refusal(token, err)
	}
	for _, name := range []string{providersFile, daemonFileName, cgroupFile, trustFile, pageSessionsFile, hostIDFile} {
		if err := m.secure(filepath.Join(home, name), privateFileMode, false); err != nil {
			return err
		}
	}
	if m.Store == "" { // on PostgreSQL no SQLite file is made
		if err := m.secureDatabase(home); err != nil {
			return err
		}
	}
	if err := m.secure(m.worktreesRoot(home), privateDirMode, true); err != nil {
		return fmt.Errorf("worktrees: %w", err)
	}
	if err := m.secure(filepath.Join(home, mirrorsDir), privateDirMode, true); err != nil {
		return fmt.Errorf("mirrors: %w", err)
	}
	return m.secure(filepath.Join(home, tmpDir), privateDirMode, false)
}

// secureDatabase creates the SQLite database file 0600 when missing and
// checks it and its companions (WAL, shared memory, lock).
func (m *Main) secureDatabase(home string) error {
	db := filepath.Join(home, databaseFile)
	if f, err := os.OpenFile(db, os.O_WRONLY|os.O_CREATE|os.O_EXCL, privateFileMode); err == nil {
		if err := f.Close(); err != nil {
			return fmt.Errorf("create %s: %w", db, err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", db, err)
	}
	for _, p := range []string{db, db + walSuffix, db + shmSuffix, db + lockSuffix} {
		if err := m.secure(p, privateFileMode, false); err != nil {
			return err
		}
	}
	return nil
}

// secure checks path with checkTrusted and narrows its mode to perm when
// it has more bits; with mkdir, a missing path is created as a directory
// of mode perm (with its missing parents) first, and a missing path is
// otherwise fine.
func (m *Main) secure(path string, perm fs.FileMode, mkdir bool) error {
	real, err := checkTrusted(path)
	if errors.Is(err, fs.ErrNotExist) {
		if !mkdir {
			return nil
		}
		if err := os.MkdirAll(path, perm); err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		real, err = checkTrusted(path)
	}
	if ue, ok := isUntrusted(err); ok && !ue.Loose {
		return fmt.Errorf("refusing %s: %s: %s", path, ue.Reason(), ue.Fix)
	} else if err != nil && !ok {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if mkdir && !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", path)
	}
	if was := fi.Mode().Perm(); was&^perm != 0 {
		if err := os.Chmod(real, was&perm); err != nil {
			return fmt.Errorf("refusing %s: its mode %04o lets others in, and it cannot be narrowed to %04o: %w", path, was, was&perm, err)
		}
		m.Logger.Info("narrowed the mode of the daemon's own data: only its user may use it", "path", path,
			"was", fmt.Sprintf("%04o", was), "now", fmt.Sprintf("%04o", was&perm))
	}
	return nil
}

// trustedProviders is the registry's Trust check of providers.json: the
// file and the directories on the way to it must pass checkTrusted, on
// every reload, so that a file another user owns or can write never
// defines what the daemon launches.
func trustedProviders(path string) error {
	_, err := checkTrusted(path)
	return refusal(path, err)
}
