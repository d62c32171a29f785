package worktree

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// trustVersion is the version of the trust record's format.
const trustVersion = 1

// Errors of the trust of setup files.
var (
	// ErrNoSetupFile is returned when a repository has no setup file (or
	// one that asks for nothing) where one is needed.
	ErrNoSetupFile = errors.New("no worktree setup file")
	// ErrSetupChanged is returned by Trust when the setup file's content
	// is not the one whose hash the caller gave: it changed since it was
	// shown.
	ErrSetupChanged = errors.New("the setup file changed since it was read")
	// ErrUntrusted is returned by PrepareSetup when the repository's setup
	// file, as it is now, has not been trusted.
	ErrUntrusted = errors.New("the setup file is not trusted")
	// ErrSetupRunning is returned by PrepareSetup while the worktree's
	// setup is pending or running.
	ErrSetupRunning = errors.New("the worktree's setup is running")
	// ErrNoTrustFile is returned by Trust and Revoke when the Manager has
	// no Config.TrustFile to record trust in.
	ErrNoTrustFile = errors.New("no trust record configured")
)

// SetupFile is a repository's setup file as read once: the exact bytes,
// their hash, what they say, and whether that content is trusted.
type SetupFile struct {
	// Repo is the top of the main checkout the file was read from.
	Repo string `json:"repo"`
	// File is the file's path.
	File string `json:"file"`
	// Content is the file's bytes (at most 1 MiB).
	Content []byte `json:"-"`
	// SHA256 is the hex SHA-256 of Content.
	SHA256 string `json:"sha256"`
	// Setup is what Content asks for.
	Setup Setup `json:"setup"`
	// Trusted says the user trusted exactly this content.
	Trusted bool `json:"trusted"`
	// TrustedSHA256 is the hash of the content trusted before, when it is
	// not this one: the file changed since it was trusted.
	TrustedSHA256 string `json:"trusted_sha256,omitempty"`
	// TrustedAt is when this content was trusted.
	TrustedAt time.Time `json:"trusted_at,omitzero"`
}

// TrustEntry is one trusted setup file: the repository (the real path of
// its main checkout) and the hash of the content the user trusted.
type TrustEntry struct {
	Repo      string    `json:"repo"`
	SHA256    string    `json:"sha256"`
	TrustedAt time.Time `json:"trusted_at"`
}

// trustDoc is the JSON shape of the trust record.
type trustDoc struct {
	Version int          `json:"version"`
	Trusted []TrustEntry `json:"trusted"`
}

// readSetupFile reads the setup file at the top of top once: not through
// a symbolic link, a regular file only, at most maxSetupFile bytes. ok is
// false when there is none.
func readSetupFile(top string) (data []byte, file string, ok bool, err error) {
	file = filepath.Join(top, SetupFileName)
	// O_NOFOLLOW: a link is refused (ELOOP), never followed; O_NONBLOCK: a
	// FIFO does not block the open (it is then refused as not regular).
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, file, false, nil
	case errors.Is(err, syscall.ELOOP):
		return nil, file, true, fmt.Errorf("%w: %s is a symbolic link: it is not followed; make it a regular file", ErrSetupConfig, file)
	case err != nil:
		return nil, file, true, fmt.Errorf("%w: %w", ErrSetupConfig, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, file, true, fmt.Errorf("%w: %w", ErrSetupConfig, err)
	} else if !fi.Mode().IsRegular() {
		return nil, file, true, fmt.Errorf("%w: %s is not a regular file", ErrSetupConfig, file)
	}
	data, err = io.ReadAll(io.LimitReader(f, maxSetupFile+1))
	if err != nil {
		return nil, file, true, fmt.Errorf("%w: %s: %w", ErrSetupConfig, file, err)
	}
	if len(data) > maxSetupFile {
		return nil, file, true, fmt.Errorf("%w: %s is larger than %d bytes", ErrSetupConfig, file, maxSetupFile)
	}
	return data, file, true, nil
}

// loadSetupFile reads, hashes and parses the setup file of the main
// checkout top, and looks its hash up in the trust record: what is parsed
// and run is exactly what was hashed. ok is false when there is none.
func (m *Manager) loadSetupFile(top string) (SetupFile, bool, error) {
	data, file, ok, err := readSetupFile(top)
	if err != nil || !ok {
		return SetupFile{}, ok, err
	}
	sf, err := m.setupFileOf(top, file, data)
	return sf, true, err
}

// setupFileOf parses and hashes the content data of the setup file file
// of the repository repo (a main checkout's top, or a URL), and looks its
// hash up in the trust record.
func (m *Manager) setupFileOf(top, file string, data []byte) (SetupFile, error) {
	s, err := ParseSetup(data)
	if err != nil {
		return SetupFile{}, setupFileError(file, err)
	}
	s.File = file
	sum := sha256.Sum256(data)
	sf := SetupFile{Repo: top, File: file, Content: data, SHA256: hex.EncodeToString(sum[:]), Setup: s}
	doc, err := m.readTrust()
	if err != nil {
		m.log.Warn("read the trust record: no setup file is trusted until it is fixed", keyErr, err)
	}
	for _, e := range doc.Trusted {
		if e.Repo != top {
			continue
		}
		if e.SHA256 == sf.SHA256 {
			sf.Trusted, sf.TrustedAt = true, e.TrustedAt
		} else {
			sf.TrustedSHA256 = e.SHA256
		}
	}
	return sf, nil
}

// SetupFileAt is SetupFileOf for a repository whose top level is known
// already (a Worktree's Repo, as the Manager resolved it): it reads the
// file and the trust record without asking git where the top is.
func (m *Manager) SetupFileAt(top string) (SetupFile, error) {
	sf, ok, err := m.loadSetupFile(top)
	if err != nil {
		return SetupFile{}, err
	}
	if !ok {
		return SetupFile{}, fmt.Errorf("%w: %s has no %s", ErrNoSetupFile, top, SetupFileName)
	}
	return sf, nil
}

// SetupFileOf reads the setup file of repo's main checkout (see
// LoadSetup) and says whether its content is trusted. Errors wrap
// ErrNotRepository, ErrSetupConfig, or ErrNoSetupFile when there is none.
func (m *Manager) SetupFileOf(ctx context.Context, repo string) (SetupFile, error) {
	if m.mirrors != "" {
		// A repository given by URL: its file as the remote holds it now.
		if _, err := m.remoteFor(ctx, repo); err == nil {
			if err := m.Fetch(ctx, repo); err != nil {
				return SetupFile{}, err
			}
		}
	}
	info, err := m.repo(ctx, repo)
	if err != nil {
		return SetupFile{}, err
	}
	sf, ok, err := m.setupFileFor(ctx, info, "")
	if err != nil {
		return SetupFile{}, err
	}
	if !ok {
		return SetupFile{}, fmt.Errorf("%w: %s has no %s", ErrNoSetupFile, info.name(), SetupFileName)
	}
	return sf, nil
}

// Trust records that the user trusts the setup file of repo's main
// checkout with the content whose hex SHA-256 is sum: the file is read
// again, and recorded only when its hash is sum (else ErrSetupChanged), so
// that what the user was shown is what runs. It replaces what was trusted
// for the repository before. The second result lists the sessions whose
// setup was skipped as untrusted and that can now run it (PrepareSetup).
func (m *Manager) Trust(ctx context.Context, repo, sum string) (SetupFile, []string, error) {
	sf, err := m.SetupFileOf(ctx, repo)
	if err != nil {
		return SetupFile{}, nil, err
	}
	if !strings.EqualFold(sum, sf.SHA256) {
		return SetupFile{}, nil, fmt.Errorf("%w: %s has SHA-256 %s now, not %s; read it again", ErrSetupChanged, sf.File, sf.SHA256, sum)
	}
	now := time.Now().UTC().Truncate(time.Second)
	err = m.updateTrust(func(doc *trustDoc) {
		doc.Trusted = slices.DeleteFunc(doc.Trusted, func(e TrustEntry) bool { return e.Repo == sf.Repo })
		doc.Trusted = append(doc.Trusted, TrustEntry{Repo: sf.Repo, SHA256: sf.SHA256, TrustedAt: now})
	})
	if err != nil {
		return SetupFile{}, nil, err
	}
	sf.Trusted, sf.TrustedAt, sf.TrustedSHA256 = true, now, ""
	m.log.Info("setup file trusted", keyRepo, sf.Repo, "sha256", sf.SHA256)
	return sf, m.skippedSessions(sf.Repo), nil
}

// Revoke forgets the trust of repo's setup file; repo may be gone from the
// disk (it is then matched as given, made absolute). It reports whether
// anything was trusted.
func (m *Manager) Revoke(ctx context.Context, repo string) (bool, error) {
	keys := []string{}
	if abs, err := filepath.Abs(repo); err == nil {
		keys = append(keys, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			keys = append(keys, real)
		}
	}
	if info, err := m.repo(ctx, repo); err == nil {
		keys = append(keys, info.name())
	}
	if IsURL(repo) {
		keys = append(keys, repo)
	}
	found := false
	err := m.updateTrust(func(doc *trustDoc) {
		doc.Trusted = slices.DeleteFunc(doc.Trusted, func(e TrustEntry) bool {
			if slices.Contains(keys, e.Repo) {
				found = true
				return true
			}
			return false
		})
	})
	if err == nil && found {
		m.log.Info("setup file trust revoked", keyRepo, repo)
	}
	return found, err
}

// TrustList returns the trusted setup files, by repository.
func (m *Manager) TrustList() ([]TrustEntry, error) {
	doc, err := m.readTrust()
	slices.SortFunc(doc.Trusted, func(a, b TrustEntry) int { return strings.Compare(a.Repo, b.Repo) })
	return doc.Trusted, err
}

// readTrust reads the trust record; a missing one is empty.
func (m *Manager) readTrust() (trustDoc, error) {
	doc := trustDoc{Version: trustVersion}
	if m.trustFile == "" {
		return doc, nil
	}
	data, err := os.ReadFile(m.trustFile)
	if errors.Is(err, os.ErrNotExist) {
		return doc, nil
	}
	if err != nil {
		return doc, fmt.Errorf("read %s: %w", m.trustFile, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var got trustDoc
	if err := dec.Decode(&got); err != nil {
		return doc, fmt.Errorf("%s: %w", m.trustFile, err)
	}
	if got.Version != trustVersion {
		return doc, fmt.Errorf("%s: version %d is not supported", m.trustFile, got.Version)
	}
	return got, nil
}

// updateTrust changes the trust record with change and writes it
// atomically (a new file, mode 0600, renamed over the old one).
func (m *Manager) updateTrust(change func(*trustDoc)) error {
	if m.trustFile == "" {
		return ErrNoTrustFile
	}
	m.trustMu.Lock()
	defer m.trustMu.Unlock()
	doc, err := m.readTrust()
	if err != nil {
		return err
	}
	change(&doc)
	if doc.Trusted == nil {
		doc.Trusted = []TrustEntry{}
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(m.trustFile, append(data, '\n'), 0o600)
}

// writeFileAtomic writes data to a new file beside name, syncs it and
// renames it over name.
func writeFileAtomic(name string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename, there is nothing to remove
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
