package httpapi

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
)

// tokenBytes is the entropy of a token made by NewToken.
const tokenBytes = 32

// tokenFileMode is the mode of the token file; a looser one is refused.
const tokenFileMode fs.FileMode = 0o600

// Errors of the auth helpers.
var (
	// ErrInsecureListen is returned by ListenCheck for an address that is
	// not loopback when no token is set.
	ErrInsecureListen = errors.New("refusing to listen on a non-loopback address without a token")
	// ErrTokenFile is returned by LoadOrCreateToken for a token file that
	// is empty or readable by others.
	ErrTokenFile = errors.New("bad token file")
)

// NewToken returns a fresh random token: 32 bytes from crypto/rand, in hex.
func NewToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// LoadOrCreateToken returns the token kept in the file at path, creating
// the file (mode 0600, a new token) when it does not exist. A file that
// others may read, or that holds no token, is refused with ErrTokenFile
// rather than trusted.
func LoadOrCreateToken(path string) (string, error) {
	tok, err := readToken(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return tok, err
	}
	tok, err = NewToken()
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, tokenFileMode)
	if errors.Is(err, fs.ErrExist) {
		return readToken(path) // another process created it first
	}
	if err != nil {
		return "", fmt.Errorf("create token file: %w", err)
	}
	_, werr := f.WriteString(tok + "\n")
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("write token file: %w", werr)
	}
	return tok, nil
}

// readToken reads and checks an existing token file.
func readToken(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if fi.Mode().Perm()&^tokenFileMode != 0 {
		return "", fmt.Errorf("%s has mode %04o, readable by others (chmod 600 it, or delete it for a new token): %w",
			path, fi.Mode().Perm(), ErrTokenFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("%s holds no token (delete it for a new one): %w", path, ErrTokenFile)
	}
	return tok, nil
}

// ListenCheck refuses an address that is not loopback (an empty host, a
// non-loopback IP or any name but "localhost") when token is empty: without
// a token, only this machine's users may reach the API.
func ListenCheck(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if token != "" || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("listen on %q: %w", addr, ErrInsecureListen)
}

// isLoopback says whether host (no port, no brackets) is a loopback name or IP.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostAllowed checks the Host header against DNS rebinding: a page on a
// foreign name that resolves to 127.0.0.1 sends that foreign name.
// localhost, 127.0.0.1 and ::1 are always allowed, with any port, and so
// are the configured extra names.
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = normalHost(host)
	switch host {
	case "":
		return false
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	_, ok := s.hosts[host]
	return ok
}

// normalHost lower-cases a host name and strips IPv6 brackets and a
// trailing dot.
func normalHost(h string) string {
	return strings.ToLower(strings.TrimSuffix(strings.Trim(strings.TrimSpace(h), "[]"), "."))
}

// authorized says whether r carries the bearer token or a live page
// credential.
func (s *Server) authorized(r *http.Request) bool {
	_, err := s.authenticate(r)
	return err == nil
}

// bearer returns the request's bearer credential, or "".
func bearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// tokenEqual compares two tokens in time that depends on neither's
// content nor length: both are hashed first.
func tokenEqual(got, want string) bool {
	a := sha256.Sum256([]byte(got))
	b := sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
