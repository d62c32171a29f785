package httpapi

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Hosts never send the cluster key. A host proves a request it forwards
// by signing it (HeaderSignature): an HMAC-SHA256, under a key derived
// from the cluster key, of the method, the request URI, the SHA-256 of
// the body, the host it is meant for, the host that sends it, the time
// and a random nonce. The receiver checks it within signWindow of its own
// clock and accepts each nonce once (nonceCache), so a request captured
// on its way is good for nothing: not at another host, not twice, not
// altered. Before a forward uses a new connection, the host at the other
// end proves it holds the cluster key and is the host expected (hosthello.go).

// Domains of the keys derived from the cluster key, and of what each
// signs: a hello proof and a request signature are made with different
// keys over differently prefixed messages, so that the public hello
// endpoint cannot be used to sign a request.
const (
	signDomain      = "agentpool host request v1"
	hostHelloDomain = "agentpool host hello v1"
)

// Bounds of the request signatures.
const (
	// signWindow is how far a signature's time may be from this host's
	// clock; hosts share a clock within reason.
	signWindow = 30 * time.Second
	// signNonceBytes is the entropy of a signature's nonce.
	signNonceBytes = 16
	// maxSignNonces bounds the nonces remembered (see nonceCache).
	maxSignNonces = 1 << 18
	// signVersion begins the signature header.
	signVersion = "v1 "
)

// HeaderSignature carries the signature of a request another host
// forwarded (see signRequest); HeaderForwardedBy names that host.
const HeaderSignature = "X-Agentpool-Signature"

// hostKeys are the keys derived from the cluster key; both nil without
// one (no request from a host is accepted, none is signed).
type hostKeys struct {
	sign  []byte // signs forwarded requests
	hello []byte // proves this host in a hello
}

// deriveHostKeys derives the hosts' keys from clusterKey ("" = none).
func deriveHostKeys(clusterKey string) hostKeys {
	if clusterKey == "" {
		return hostKeys{}
	}
	derive := func(domain string) []byte {
		m := hmac.New(sha256.New, []byte(clusterKey))
		m.Write([]byte(domain))
		return m.Sum(nil)
	}
	return hostKeys{sign: derive(signDomain), hello: derive(hostHelloDomain)}
}

// requestSignature is what a host signs of a request it forwards.
type requestSignature struct {
	method string
	uri    string // path and raw query, as on the request line
	body   [sha256.Size]byte
	to     string // the host the request is meant for
	from   string // the host that sends it
	at     int64  // Unix seconds
	nonce  string // hex
}

// mac is the signature's HMAC under key: every field length-prefixed, so
// that no two requests sign the same bytes.
func (rs requestSignature) mac(key []byte) []byte {
	m := hmac.New(sha256.New, key)
	var n [4]byte
	for _, f := range []string{signDomain, rs.method, rs.uri, string(rs.body[:]), rs.to, rs.from, strconv.FormatInt(rs.at, 10), rs.nonce} {
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		m.Write(n[:])
		m.Write([]byte(f))
	}
	return m.Sum(nil)
}

// header is the value of HeaderSignature for rs, signed with key.
func (rs requestSignature) header(key []byte) string {
	v := url.Values{}
	v.Set("to", rs.to)
	v.Set("t", strconv.FormatInt(rs.at, 10))
	v.Set("n", rs.nonce)
	v.Set("b", hex.EncodeToString(rs.body[:]))
	v.Set("s", hex.EncodeToString(rs.mac(key)))
	return signVersion + v.Encode()
}

// newRequestSignature returns the signature of a request from self to
// host, at now, with a fresh nonce.
func newRequestSignature(method, uri string, body [sha256.Size]byte, host, self string, now time.Time) requestSignature {
	n := make([]byte, signNonceBytes)
	_, _ = rand.Read(n) // never fails (crypto/rand)
	return requestSignature{method: method, uri: uri, body: body, to: host, from: self, at: now.Unix(), nonce: hex.EncodeToString(n)}
}

// parseSignature reads a HeaderSignature value, the method and URI of
// the request that bears it and the host that says it sent it; it
// returns the signature and the HMAC it claims.
func parseSignature(h, method, uri, from string) (requestSignature, []byte, error) {
	rest, ok := strings.CutPrefix(h, signVersion)
	if !ok {
		return requestSignature{}, nil, fmt.Errorf("the signature is not of version %q", strings.TrimSpace(signVersion))
	}
	v, err := url.ParseQuery(rest)
	if err != nil {
		return requestSignature{}, nil, fmt.Errorf("malformed signature: %w", err)
	}
	rs := requestSignature{method: method, uri: uri, to: v.Get("to"), from: from, nonce: v.Get("n")}
	if rs.at, err = strconv.ParseInt(v.Get("t"), 10, 64); err != nil {
		return requestSignature{}, nil, fmt.Errorf("malformed signature time %q", v.Get("t"))
	}
	if n, err := hex.DecodeString(rs.nonce); err != nil || len(n) != signNonceBytes {
		return requestSignature{}, nil, fmt.Errorf("malformed signature nonce %q", rs.nonce)
	}
	if b, err := hex.DecodeString(v.Get("b")); err != nil || len(b) != sha256.Size {
		return requestSignature{}, nil, fmt.Errorf("malformed body digest %q", v.Get("b"))
	} else {
		copy(rs.body[:], b)
	}
	mac, err := hex.DecodeString(v.Get("s"))
	if err != nil || len(mac) != sha256.Size {
		return requestSignature{}, nil, fmt.Errorf("malformed signature value")
	}
	return rs, mac, nil
}

// hostClaim says whether r claims to come from another host: it bears a
// header only hosts send. Such a request is authenticated by its proof
// alone (see hostAuth), whatever else it bears.
func hostClaim(r *http.Request) bool {
	return r.Header.Get(HeaderForwardedBy) != "" || r.Header.Get(HeaderSignature) != "" || r.Header.Get(HeaderClusterKey) != ""
}

// hostKey is the request context key of the host that signed a request.
type hostKey struct{}

// provenHost is the host whose signature of r hostAuth checked, or "".
func provenHost(r *http.Request) string {
	h, _ := r.Context().Value(hostKey{}).(string)
	return h
}

// errClusterKeySent refuses a request bearing the cluster key itself.
var errClusterKeySent = &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
	Message: "hosts no longer send the cluster key; they sign what they forward (" + HeaderSignature + "): " +
		"a request bearing " + HeaderClusterKey + " comes from a host of an older version, or from someone who is not a host"}

// hostRefused is the 401 of a request whose claim to come from a host
// was not proved.
func hostRefused(format string, args ...any) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: fmt.Sprintf(format, args...)}
}

// hostAuth checks the proof of r, which claims to come from another host
// (hostClaim): its signature, meant for this host, made within
// signWindow, never seen before, over r's method, URI and body (read
// here, within MaxBody, and put back for the handler). It returns r with
// the host that signed it, or the 401 that refuses it, which it logs.
func (s *Server) hostAuth(w http.ResponseWriter, r *http.Request) (*http.Request, error) {
	host, err := s.checkSignature(w, r)
	if err != nil {
		s.log.Warn("request claiming to come from a host refused", "remote", r.RemoteAddr, "forwarded_by", r.Header.Get(HeaderForwardedBy),
			logKeyMethod, r.Method, logKeyPath, r.URL.Path, logKeyErr, errorFor(err).Message)
		return r, err
	}
	return r.WithContext(context.WithValue(r.Context(), hostKey{}, host)), nil
}

// checkSignature is hostAuth but for the log.
func (s *Server) checkSignature(w http.ResponseWriter, r *http.Request) (string, error) {
	if r.Header.Get(HeaderClusterKey) != "" {
		return "", errClusterKeySent
	}
	if s.keys.sign == nil {
		return "", hostRefused("this daemon shares its store with no other host: it takes no request from one")
	}
	from, h := r.Header.Get(HeaderForwardedBy), r.Header.Get(HeaderSignature)
	switch {
	case h == "":
		return "", hostRefused("a request naming the host that forwarded it (%s) must bear that host's signature (%s); this one bears none", HeaderForwardedBy, HeaderSignature)
	case from == "":
		return "", hostRefused("a signed request must name the host that signed it (%s)", HeaderForwardedBy)
	}
	rs, mac, err := parseSignature(h, r.Method, r.RequestURI, from)
	if err != nil {
		return "", hostRefused("bad host signature: %v", err)
	}
	if !hmac.Equal(mac, rs.mac(s.keys.sign)) {
		return "", hostRefused("bad host signature: it does not match the request (altered on its way?) or was not made with this cluster's key")
	}
	if self := s.selfHost(); rs.to != self {
		return "", hostRefused("the request was signed for host %q; this is host %q", rs.to, self)
	}
	now := time.Now()
	if off := now.Sub(time.Unix(rs.at, 0)); off > signWindow || off < -signWindow {
		return "", hostRefused("the request was signed %v from this host's clock (%s), more than the ±%v allowed: the hosts' clocks must agree",
			off.Round(time.Second), now.UTC().Format(time.RFC3339), signWindow)
	}
	if err := s.bufferBody(w, r); err != nil {
		return "", err
	}
	sum := sha256.Sum256(bodyBytes(r))
	if !hmac.Equal(sum[:], rs.body[:]) {
		return "", hostRefused("the request's body is not the one its host signed (altered on its way?)")
	}
	if err := s.nonces.add(now.Unix(), rs.at, rs.nonce); err != nil {
		return "", hostRefused("%v", err)
	}
	return from, nil
}

// bodyBytes is r's body, which bufferBody read.
func bodyBytes(r *http.Request) []byte {
	if b, ok := r.Body.(*bufferedBody); ok {
		return b.b
	}
	return nil
}

// bufferedBody is a request body read in full (bufferBody).
type bufferedBody struct {
	*bytes.Reader
	b []byte
}

func newBufferedBody(b []byte) *bufferedBody { return &bufferedBody{Reader: bytes.NewReader(b), b: b} }

// Close does nothing: there is nothing left to read from the network.
func (*bufferedBody) Close() error { return nil }

var _ io.ReadCloser = (*bufferedBody)(nil)
