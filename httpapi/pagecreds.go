package httpapi

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Page credentials: what the web page gets for a login code; it keeps
// their SHA-256 as a non-extractable key and authenticates by challenge
// (pageauth.go). The server keeps only their SHA-256, with an id,
// their times and the browser's User-Agent, for listing and revoking; with
// a file configured (Config.PageSessionsFile) it keeps them there too, so
// that a restart leaves pages logged in.

// Defaults and bounds of page credentials.
const (
	// PageCredentialTTL is how long a page credential is valid, counted
	// from the login (a fixed expiry: use does not extend it).
	PageCredentialTTL = 7 * 24 * time.Hour
	// PageCredentialPrefix begins every page credential.
	PageCredentialPrefix = "apc_"
	// maxPageCredentials bounds the live credentials; past it the oldest goes.
	maxPageCredentials = 64
	// pageCredentialBytes is the entropy of a page credential.
	pageCredentialBytes = 32
	// pageIDBytes is the entropy of a page credential's public id.
	pageIDBytes = 6
	// lastUsedWriteEvery is how stale the last-use time on disk may get.
	lastUsedWriteEvery = 5 * time.Minute
	// pageFileMode is the mode of the page credentials' file.
	pageFileMode fs.FileMode = 0o600
	// pageFileVersion is the version of its format. Version 1 held
	// credentials that pages sent as bearer tokens and kept in
	// localStorage, where an impostor on the daemon's port could collect
	// them; they are not carried over (see pageauth.go).
	pageFileVersion = 2
	// maxUserAgent bounds the User-Agent kept for a listing.
	maxUserAgent = 200
)

// ErrPageSessionsFile is returned by New for a page credentials' file that
// others may read or write.
var ErrPageSessionsFile = errors.New("bad page sessions file")

// PageSession describes one page credential (never the credential itself),
// as GET /v1/page-sessions lists it.
type PageSession struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// LastUsed is when it last authorized a request (to within
	// lastUsedWriteEvery across a restart).
	LastUsed  time.Time `json:"last_used"`
	UserAgent string    `json:"user_agent,omitempty"`
	// Current marks the credential that asked for the listing.
	Current bool `json:"current,omitempty"`
}

// pageRecord is a PageSession with the credential's hash, as kept.
type pageRecord struct {
	PageSession
	Hash string `json:"sha256"`
	// saved is the LastUsed last written to the file.
	saved time.Time
}

// pageFile is the JSON document of the page credentials' file.
type pageFile struct {
	Version  int           `json:"version"`
	Sessions []*pageRecord `json:"sessions"`
}

// pageCreds holds the live page credentials, by hash.
type pageCreds struct {
	path string // "" keeps them in memory only

	mu     sync.Mutex
	byHash map[string]*pageRecord
	// unsaved: the last write of the file failed (a full disk), so it may
	// still hold credentials revoked since.
	unsaved bool
}

// loadPageCreds reads path (if any). A missing file means none; a file
// that others may read or write is refused; one that cannot be parsed is
// reported through warn and replaced at the next write (its pages log in
// again).
func loadPageCreds(path string, now time.Time, warn func(msg string, err error)) (*pageCreds, error) {
	p := &pageCreds{path: path, byHash: map[string]*pageRecord{}}
	if path == "" {
		return p, nil
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("page sessions file: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&^pageFileMode != 0 {
		return nil, fmt.Errorf("%s has mode %s; want a regular file of mode 0600 (chmod 600 it, or delete it to log every page out): %w",
			path, fi.Mode(), ErrPageSessionsFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read page sessions file: %w", err)
	}
	var f pageFile
	if err := json.Unmarshal(b, &f); err == nil && f.Version == 1 {
		warn("page logins from before the challenge login are dropped: log each page in again (agentpool open)", fmt.Errorf("%s: version 1", path))
		return p, nil
	}
	if err := json.Unmarshal(b, &f); err != nil || f.Version != pageFileVersion {
		if err == nil {
			err = fmt.Errorf("version %d, want %d", f.Version, pageFileVersion)
		}
		warn("the page sessions file cannot be read: every page must log in again", fmt.Errorf("%s: %w", path, err))
		return p, nil
	}
	for _, r := range f.Sessions {
		if r == nil || len(r.Hash) != 2*sha256.Size || r.ID == "" || !now.Before(r.ExpiresAt) {
			continue
		}
		r.saved = r.LastUsed
		p.byHash[r.Hash] = r
	}
	return p, nil
}

// hashCredential is the key of a credential.
func hashCredential(cred string) string {
	h := sha256.Sum256([]byte(cred))
	return hex.EncodeToString(h[:])
}

// create makes a new credential valid from now, dropping expired ones and,
// past maxPageCredentials, the oldest. It returns the credential and its
// record; the record is on disk when create returns.
func (p *pageCreds) create(now time.Time, userAgent string) (string, PageSession, error) {
	b := make([]byte, pageCredentialBytes)
	id := make([]byte, pageIDBytes)
	if _, err := rand.Read(b); err != nil {
		return "", PageSession{}, fmt.Errorf("page credential: %w", err)
	}
	if _, err := rand.Read(id); err != nil {
		return "", PageSession{}, fmt.Errorf("page credential id: %w", err)
	}
	cred := PageCredentialPrefix + base64.RawURLEncoding.EncodeToString(b)
	if len(userAgent) > maxUserAgent {
		userAgent = userAgent[:maxUserAgent]
	}
	r := &pageRecord{PageSession: PageSession{ID: "pg-" + hex.EncodeToString(id), CreatedAt: now, ExpiresAt: now.Add(PageCredentialTTL),
		LastUsed: now, UserAgent: strings.ToValidUTF8(userAgent, "?")}, Hash: hashCredential(cred), saved: now}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropExpiredLocked(now)
	for len(p.byHash) >= maxPageCredentials {
		var oldest *pageRecord
		for _, o := range p.byHash {
			if oldest == nil || o.CreatedAt.Before(oldest.CreatedAt) {
				oldest = o
			}
		}
		delete(p.byHash, oldest.Hash)
	}
	p.byHash[r.Hash] = r
	if err := p.saveLocked(); err != nil {
		delete(p.byHash, r.Hash)
		return "", PageSession{}, err
	}
	return cred, r.PageSession, nil
}

// key returns the MAC key of the live credential with this id (the
// SHA-256 of the credential: see pageauth.go) and its expiry, or false.
func (p *pageCreds) key(now time.Time, id string) ([]byte, time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.byIDLocked(id)
	if r == nil || !now.Before(r.ExpiresAt) {
		return nil, time.Time{}, false
	}
	k, err := hex.DecodeString(r.Hash)
	if err != nil {
		return nil, time.Time{}, false
	}
	return k, r.ExpiresAt, true
}

// touch says whether the credential with this id is live, and records
// its use, writing the file when the time on disk is stale.
func (p *pageCreds) touch(now time.Time, id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.byIDLocked(id)
	if r == nil || !now.Before(r.ExpiresAt) {
		return false
	}
	r.LastUsed = now
	if now.Sub(r.saved) >= lastUsedWriteEvery {
		_ = p.saveLocked() // a stale last-use time is harmless; the next write retries
	}
	return true
}

// byIDLocked returns the record with this id, or nil.
func (p *pageCreds) byIDLocked(id string) *pageRecord {
	if id == "" {
		return nil
	}
	for _, r := range p.byHash {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// alive says whether the credential with this id is still valid.
func (p *pageCreds) alive(now time.Time, id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.byIDLocked(id)
	return r != nil && now.Before(r.ExpiresAt)
}

// list returns the live credentials, oldest first, marking current.
func (p *pageCreds) list(now time.Time, current string) []PageSession {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropExpiredLocked(now)
	out := make([]PageSession, 0, len(p.byHash))
	for _, r := range p.byHash {
		s := r.PageSession
		s.Current = current != "" && s.ID == current
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// revoke forgets the credential with id ("" = every one) at once, and
// then writes the file. It returns how many it revoked.
func (p *pageCreds) revoke(id string) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for h, r := range p.byHash {
		if id == "" || r.ID == id {
			delete(p.byHash, h)
			n++
		}
	}
	if n == 0 && !p.unsaved {
		return 0, nil
	}
	// A revoke takes effect at once; when the file cannot be written (a
	// full disk) the error says so, and a retry writes it even though
	// there is nothing left to revoke in memory.
	return n, p.saveLocked()
}

// dropExpiredLocked forgets the expired credentials.
func (p *pageCreds) dropExpiredLocked(now time.Time) {
	for h, r := range p.byHash {
		if !now.Before(r.ExpiresAt) {
			delete(p.byHash, h)
		}
	}
}

// saveLocked writes the credentials' hashes to the file (writeLocked)
// and remembers whether that failed.
func (p *pageCreds) saveLocked() error {
	err := p.writeLocked()
	p.unsaved = err != nil
	return err
}

// writeLocked writes the credentials' hashes to the file atomically (a
// 0600 temporary file in the same directory, synced, renamed over it).
func (p *pageCreds) writeLocked() error {
	if p.path == "" {
		return nil
	}
	f := pageFile{Version: pageFileVersion, Sessions: make([]*pageRecord, 0, len(p.byHash))}
	for _, r := range p.byHash {
		f.Sessions = append(f.Sessions, r)
	}
	sort.Slice(f.Sessions, func(i, j int) bool { return f.Sessions[i].CreatedAt.Before(f.Sessions[j].CreatedAt) })
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode page sessions: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p.path), filepath.Base(p.path)+".*")
	if err != nil {
		return fmt.Errorf("write page sessions: %w", err)
	}
	werr := tmp.Chmod(pageFileMode)
	if werr == nil {
		_, werr = tmp.Write(append(b, '\n'))
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), p.path)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write page sessions: %w", werr)
	}
	for _, r := range p.byHash {
		r.saved = r.LastUsed
	}
	return nil
}
