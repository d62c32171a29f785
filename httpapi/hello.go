package httpapi

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// The daemon proves itself before a client sends its token.
//
// A daemon that stopped leaves its port free, and any local user may bind
// it: a client that sent its token to whatever answers there would hand it
// to an impostor, and the token would work against the daemon once it is
// back. So the Client (the CLI's, the MCP server's) sends its token over a
// plain-http connection only after the process at the other end proved, on
// that very connection, that it knows the token: right after dialing, the
// Client sends GET /v1/hello with a fresh random nonce and the token's
// public id, and the daemon answers with an HMAC of the nonce keyed by
// the token's SHA-256. An impostor cannot answer; the Client closes the
// connection and the token is never sent. Over https the certificate
// proves the daemon instead.
//
// The proof gives nothing away: its key is a hash of the token (what the
// daemon keeps of other hosts' tokens too), the nonce is the client's own,
// and the domain string of a proof is used for nothing else, so asking
// the daemon for proofs of chosen nonces yields nothing an impostor could
// use later (a client picks 32 fresh random bytes every time).

// Hello protocol constants.
const (
	// helloPath is the public route of the proof.
	helloPath = "/v1/hello"
	// helloDomain begins the message a hello proof authenticates.
	helloDomain = "agentpool daemon hello v1\x00"
	// credIDDomain begins the message whose hash is a credential's id.
	credIDDomain = "agentpool credential id v1\x00"
	// helloNonceBytes is the size of a hello's nonce.
	helloNonceBytes = 32
	// credIDBytes is the size of a credential id.
	credIDBytes = 16
	// helloTimeout bounds a hello when the dial's context has no deadline.
	helloTimeout = 10 * time.Second
	// maxHelloAnswer bounds the answer to a hello the Client reads.
	maxHelloAnswer = 8 << 10
)

// ErrUnproven is returned (wrapped) by the Client when the process at the
// daemon's address did not prove it knows the token: the daemon may have
// stopped and another program taken its port. The token was not sent.
var ErrUnproven = errors.New("the program at the daemon's address did not prove it is the daemon that issued the token; the token was not sent")

// UnprovenError says why the program at Addr did not prove itself. It
// matches ErrUnproven (errors.Is), and unwraps to the daemon's own *Error
// when the daemon refused the credential (a 401 to the hello).
type UnprovenError struct {
	// Addr is the address dialed (host:port).
	Addr string
	// Reason is what went wrong, e.g. "answered the hello with a proof
	// that does not match the token".
	Reason string
	// Err is the refusal of a daemon that does not know the credential.
	Err error
}

func (e *UnprovenError) Error() string {
	return ErrUnproven.Error() + ": " + e.Addr + " " + e.Reason
}

// Is makes an *UnprovenError match ErrUnproven.
func (e *UnprovenError) Is(target error) bool { return target == ErrUnproven }

// Unwrap returns the daemon's refusal, if any.
func (e *UnprovenError) Unwrap() error { return e.Err }

// Hello is the answer to GET /v1/hello.
type Hello struct {
	// Proof is hex(HMAC-SHA256(key = SHA-256(credential), helloDomain +
	// nonce + "\x00" + credential id)).
	Proof string `json:"proof"`
}

// credentialID is the public id of a credential whose SHA-256 is sum.
func credentialID(sum []byte) string {
	h := sha256.New()
	h.Write([]byte(credIDDomain))
	h.Write(sum)
	return hex.EncodeToString(h.Sum(nil)[:credIDBytes])
}

// helloProof is the proof of a credential whose SHA-256 is sum, for nonce
// (hex) and the credential's id.
func helloProof(sum []byte, nonce, id string) string {
	m := hmac.New(sha256.New, sum)
	m.Write([]byte(helloDomain))
	m.Write([]byte(nonce))
	m.Write([]byte{0})
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// TokenHashes is what a Cluster may also provide: the SHA-256 of each live
// host's user token, so that a host proves it knows a token another host
// issued (a user's token works on every host).
type TokenHashes interface {
	TokenHashes(ctx context.Context) [][]byte
}

// hello serves GET /v1/hello?nonce=HEX&cred=ID: the proof that this daemon
// knows the credential whose id is ID. It is public and cheap; an unknown
// id is answered 401 like a wrong token.
func (s *Server) hello(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	nonce, id := q.Get("nonce"), q.Get("cred")
	if b, err := hex.DecodeString(nonce); err != nil || len(b) != helloNonceBytes {
		return badRequest("nonce", "nonce must be %d random bytes in hex", helloNonceBytes)
	}
	if b, err := hex.DecodeString(id); err != nil || len(b) != credIDBytes {
		return badRequest("cred", "cred must be a credential id: %d bytes in hex", credIDBytes)
	}
	sum := s.credentialSum(r.Context(), id)
	if sum == nil {
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
			Message: "this daemon does not know the credential of that id: it is not the token of this daemon or of a live host of its cluster"}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, Hello{Proof: helloProof(sum, nonce, id)})
	return nil
}

// credentialSum returns the SHA-256 of the token whose id is id: this
// daemon's, or a live host's of its cluster; nil when none is.
func (s *Server) credentialSum(ctx context.Context, id string) []byte {
	if s.cfg.Token != "" {
		sum := sha256.Sum256([]byte(s.cfg.Token))
		if hmac.Equal([]byte(credentialID(sum[:])), []byte(id)) {
			return sum[:]
		}
	}
	if th, ok := s.cfg.Cluster.(TokenHashes); ok && s.cfg.Cluster != nil {
		for _, sum := range th.TokenHashes(ctx) {
			if hmac.Equal([]byte(credentialID(sum)), []byte(id)) {
				return sum
			}
		}
	}
	return nil
}

// provingTransports are the transports of Clients that prove the daemon,
// one per daemon address and token.
var provingTransports struct {
	sync.Mutex
	m map[string]*http.Client
}

// maxProvingTransports bounds provingTransports (a process talks to one
// daemon or a handful; tests make many).
const maxProvingTransports = 64

// provingClient returns the HTTP client of a Client whose BaseURL is
// plain http and which has a token: each connection it opens is used
// only once the daemon proved it knows the token.
func provingClient(base, token string) *http.Client {
	sum := sha256.Sum256([]byte(token))
	key := base + "\x00" + hex.EncodeToString(sum[:])
	provingTransports.Lock()
	defer provingTransports.Unlock()
	if hc, ok := provingTransports.m[key]; ok {
		return hc
	}
	if provingTransports.m == nil || len(provingTransports.m) >= maxProvingTransports {
		for _, hc := range provingTransports.m {
			hc.CloseIdleConnections()
		}
		provingTransports.m = map[string]*http.Client{}
	}
	p := &prover{sum: sum[:], id: credentialID(sum[:]), dialer: &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the daemon is reached directly: a proxy would see the token
	tr.DialContext = p.dial
	hc := &http.Client{Transport: tr}
	provingTransports.m[key] = hc
	return hc
}

// prover dials connections to a daemon and has it prove, on each, that it
// knows the token whose SHA-256 is sum.
type prover struct {
	sum    []byte
	id     string
	dialer *net.Dialer
}

// dial connects to addr and returns the connection once the daemon there
// proved itself on it; otherwise it closes the connection and returns an
// error wrapping ErrUnproven.
func (p *prover) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := p.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if err := p.prove(ctx, conn, addr); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// prove runs the hello on conn.
func (p *prover) prove(ctx context.Context, conn net.Conn, addr string) error {
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > helloTimeout {
		deadline = time.Now().Add(helloTimeout)
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return fmt.Errorf("hello %s: %w", addr, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	nb := make([]byte, helloNonceBytes)
	if _, err := rand.Read(nb); err != nil {
		return fmt.Errorf("hello nonce: %w", err)
	}
	nonce := hex.EncodeToString(nb)
	q := url.Values{"nonce": {nonce}, "cred": {p.id}}
	req := "GET " + helloPath + "?" + q.Encode() + " HTTP/1.1\r\nHost: " + addr +
		"\r\nUser-Agent: agentpool\r\nAccept: application/json\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return fmt.Errorf("hello %s: %w", addr, err)
	}
	br := bufio.NewReaderSize(conn, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &UnprovenError{Addr: addr, Reason: fmt.Sprintf("answered the hello with no HTTP answer (%v)", err)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHelloAnswer))
	resp.Body.Close()
	if err != nil {
		return &UnprovenError{Addr: addr, Reason: fmt.Sprintf("sent an answer to the hello that could not be read (%v)", err)}
	}
	if resp.StatusCode != http.StatusOK {
		var eb struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &eb) == nil && eb.Error.Message != "" {
			msg = eb.Error.Message
		}
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		if resp.StatusCode == http.StatusUnauthorized {
			// A daemon that does not know the token, or an impostor: either
			// way the token is refused, and was not sent.
			return &UnprovenError{Addr: addr, Reason: "does not know this token", Err: &Error{Status: resp.StatusCode, Code: CodeUnauthorized,
				Message: fmt.Sprintf("%s does not know this token (%s)", addr, msg)}}
		}
		return &UnprovenError{Addr: addr, Reason: fmt.Sprintf("answered the hello %s (%q)", resp.Status, msg)}
	}
	var h Hello
	if err := json.Unmarshal(body, &h); err != nil {
		return &UnprovenError{Addr: addr, Reason: "answered the hello with no proof"}
	}
	if !hmac.Equal([]byte(h.Proof), []byte(helloProof(p.sum, nonce, p.id))) {
		return &UnprovenError{Addr: addr, Reason: "answered the hello with a proof that does not match the token"}
	}
	if br.Buffered() > 0 || resp.Close {
		return &UnprovenError{Addr: addr, Reason: "sent more than the answer to the hello"}
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return fmt.Errorf("hello %s: %w", addr, err)
	}
	return nil
}

// HelloPath is the route of the daemon's proof (GET, public).
const HelloPath = helloPath

// ServeHello answers a hello (GET HelloPath) as a daemon whose one token
// is token would: for a server that stands in for the daemon, such as a
// fake in a client's tests. A request for another credential is
// answered 401.
func ServeHello(w http.ResponseWriter, r *http.Request, token string) {
	s := &Server{cfg: Config{Token: token}}
	if err := s.hello(w, r); err != nil {
		e := errorFor(err)
		writeJSON(w, e.Status, errorBody{Error: e})
	}
}
