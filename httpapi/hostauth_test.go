package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// recorded is one request a recorder got.
type recorded struct {
	method, uri string
	header      http.Header
	body        []byte
}

// recorder is a real server on 127.0.0.1 that records every request it
// gets, then passes it to next: a relay to a real host, or, nil, an
// impostor that answers anything 200 {}.
type recorder struct {
	ts   *httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newRecorder(t testing.TB, next http.Handler) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, recorded{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: body})
		rec.mu.Unlock()
		if next == nil {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, "{}")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	}))
	t.Cleanup(rec.ts.Close)
	return rec
}

// requests returns what rec got so far.
func (rec *recorder) requests() []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]recorded(nil), rec.reqs...)
}

// relayTo is a reverse proxy to the server at base, passing every
// request on as it came.
func relayTo(t testing.TB, base string) http.Handler {
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, FlushInterval: -1}
}

// replay sends rec to the server at base as it was recorded (method,
// request URI, every header, body) but for the overrides, and returns
// the status and body of the answer.
func replay(t testing.TB, base string, rec recorded, method, uri string) (int, string) {
	t.Helper()
	if method == "" {
		method = rec.method
	}
	if uri == "" {
		uri = rec.uri
	}
	req, err := http.NewRequest(method, base+uri, bytes.NewReader(rec.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range rec.header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("replay %s %s: %v", method, uri, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// keyTraces are the forms in which the cluster key, or a key derived
// from it, could be found in what a host sent.
func keyTraces(key string) []string {
	k := deriveHostKeys(key)
	return []string{key, hex.EncodeToString([]byte(key)), base64.StdEncoding.EncodeToString([]byte(key)),
		base64.RawURLEncoding.EncodeToString([]byte(key)), hex.EncodeToString(k.sign), hex.EncodeToString(k.hello),
		string(k.sign), string(k.hello)}
}

// checkNoKey fails t if the key shows in any request rec got.
func checkNoKey(t *testing.T, who string, reqs []recorded, key string) {
	t.Helper()
	for _, r := range reqs {
		var all bytes.Buffer
		all.WriteString(r.method + " " + r.uri + "\n")
		_ = r.header.Write(&all)
		all.Write(r.body)
		for _, trace := range keyTraces(key) {
			if bytes.Contains(all.Bytes(), []byte(trace)) {
				t.Errorf("%s got the cluster key (as %q) in %s %s", who, trace, r.method, r.uri)
			}
		}
		if _, ok := r.header[http.CanonicalHeaderKey(HeaderClusterKey)]; ok {
			t.Errorf("%s got a %s header in %s %s", who, HeaderClusterKey, r.method, r.uri)
		}
	}
}

// signedHeader returns the headers of a request signed with the keys of
// clusterKey, as host from would sign it for host to at time at.
func signedHeader(t testing.TB, method, rawURL, body, to, from string, at time.Time, clusterKey string) map[string]string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	rs := newRequestSignature(method, u.RequestURI(), sha256.Sum256([]byte(body)), to, from, at)
	return map[string]string{HeaderForwardedBy: from, HeaderSignature: rs.header(deriveHostKeys(clusterKey).sign)}
}

// Forwards are signed and carry no cluster key: what a relay in front of
// host b sees of a GET, a prompt with its body and an event stream
// forwarded by host a bears a signature, never the key, and b accepts it.
func TestForwardSigned(t *testing.T) {
	fpB := &fakePool{}
	sessionWorld(fpB)
	prompts := promptRecorder(fpB)
	log := newLog(t, 64)
	streamWorld(fpB, log)
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	rec := newRecorder(t, relayTo(t, ce.b.ts.URL))
	ce.m.hosts["b"] = ClusterHost{ID: "b", Advertise: rec.ts.URL}
	ce.m.owners["s"] = "b"
	ce.m.owners["s1"] = "b"
	ctx := fwdContext(t)

	if _, err := ce.a.client.Session(ctx, "s"); err != nil {
		t.Fatalf("Session(s) through a error = %v", err)
	}
	if _, err := ce.a.client.Prompt(ctx, "s", "", "signed prompt", false); err != nil {
		t.Fatalf("Prompt(s) through a error = %v", err)
	}
	if got := prompts(); len(got) != 1 || got[0].Text != "signed prompt" {
		t.Errorf("host b got prompts %+v; want the signed one", got)
	}
	log.Publish("s1", backends.EventTurnStarted, 1, map[string]any{"turn": 1})
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := ce.a.client.Events(sctx, "s1", 0, func(backends.Event) error { return ErrStop }); err != nil {
		t.Fatalf("Events(s1) through a error = %v", err)
	}

	reqs := rec.requests()
	checkNoKey(t, "the relay in front of host b", reqs, clusterKey)
	var signed, hellos int
	for _, r := range reqs {
		switch {
		case strings.HasPrefix(r.uri, hostHelloPath+"?"):
			hellos++
		case r.header.Get(HeaderSignature) != "" && r.header.Get(HeaderForwardedBy) == "a":
			signed++
		default:
			t.Errorf("host a sent %s %s unsigned (headers %v)", r.method, r.uri, r.header)
		}
	}
	if signed != 3 || hellos < 1 {
		t.Errorf("host a sent %d signed requests and %d hellos; want 3 (a GET, a prompt, a stream) after a hello", signed, hellos)
	}
}

// A signed request captured on its way is good for nothing more: not
// again (replayed), not at another host, not altered, not for another
// endpoint.
func TestSignedRequestCaptured(t *testing.T) {
	fpB := &fakePool{}
	sessionWorld(fpB)
	prompts := promptRecorder(fpB)
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	rec := newRecorder(t, relayTo(t, ce.b.ts.URL))
	ce.m.hosts["b"] = ClusterHost{ID: "b", Advertise: rec.ts.URL}
	ce.m.owners["s"] = "b"
	if _, err := ce.a.client.Prompt(fwdContext(t), "s", "", "once", false); err != nil {
		t.Fatalf("Prompt(s) through a error = %v", err)
	}
	var prompt recorded
	for _, r := range rec.requests() {
		if r.method == http.MethodPost {
			prompt = r
		}
	}
	if prompt.header.Get(HeaderSignature) == "" {
		t.Fatalf("no signed prompt went through the relay: %+v", rec.requests())
	}
	altered := prompt
	altered.body = []byte(`{"text":"twice"}`)
	for _, c := range []struct {
		name, base  string
		rec         recorded
		method, uri string
		want        string
	}{
		{"replayed", ce.b.ts.URL, prompt, "", "", "replayed"},
		{"at another host", ce.a.ts.URL, prompt, "", "", `signed for host \"b\"; this is host \"a\"`},
		{"body altered", ce.b.ts.URL, altered, "", "", "body is not the one its host signed"},
		{"other method", ce.b.ts.URL, prompt, http.MethodPatch, "/v1/providers/demo", "bad host signature"},
		{"other endpoint", ce.b.ts.URL, prompt, "", "/v1/login-links", "bad host signature"},
	} {
		st, body := replay(t, c.base, c.rec, c.method, c.uri)
		if st != http.StatusUnauthorized || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s; want 401 saying %q", c.name, st, body, c.want)
		}
	}
	if got := prompts(); len(got) != 1 {
		t.Errorf("host b ran prompts %+v; want only the one forwarded", got)
	}
}

// The proof of a signed request is checked whatever else it bears, and a
// refusal is logged: a claim to come from a host without a valid
// signature is refused even with a valid user token, and the cluster key
// itself is no longer accepted.
func TestSignatureChecks(t *testing.T) {
	fpB := &fakePool{}
	sessionWorld(fpB)
	promptRecorder(fpB)
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	get := ce.b.ts.URL + "/v1/sessions/s"
	post := ce.b.ts.URL + "/v1/sessions/s/prompt"
	now := time.Now()
	with := func(h map[string]string, kv ...string) map[string]string {
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	for _, c := range []struct {
		name, method, url, body string
		head                    map[string]string
		status                  int
		want                    string
	}{
		{"signed", "GET", get, "", signedHeader(t, "GET", get, "", "b", "a", now, clusterKey), 200, ""},
		{"signed with a body", "POST", post, `{"text":"hi"}`, signedHeader(t, "POST", post, `{"text":"hi"}`, "b", "a", now, clusterKey), 202, ""},
		{"another body", "POST", post, `{"text":"ho"}`, signedHeader(t, "POST", post, `{"text":"hi"}`, "b", "a", now, clusterKey), 401, "body"},
		{"wrong target", "GET", get, "", signedHeader(t, "GET", get, "", "c", "a", now, clusterKey), 401, `signed for host \"c\"`},
		{"expired", "GET", get, "", signedHeader(t, "GET", get, "", "b", "a", now.Add(-2*time.Minute), clusterKey), 401, "clocks"},
		{"from the future", "GET", get, "", signedHeader(t, "GET", get, "", "b", "a", now.Add(2*time.Minute), clusterKey), 401, "clocks"},
		{"another key", "GET", get, "", signedHeader(t, "GET", get, "", "b", "a", now, "another-cluster-key-0123456789"), 401, "bad host signature"},
		{"another sender", "GET", get, "", with(signedHeader(t, "GET", get, "", "b", "a", now, clusterKey), HeaderForwardedBy, "c"), 401, "bad host signature"},
		{"signature without sender", "GET", get, "", with(signedHeader(t, "GET", get, "", "b", "", now, clusterKey)), 401, HeaderForwardedBy},
		{"forwarded-by alone", "GET", get, "", map[string]string{HeaderForwardedBy: "a"}, 401, "bears none"},
		{"forwarded-by with the token", "GET", get, "", map[string]string{HeaderForwardedBy: "a", "Authorization": "Bearer " + ce.b.token}, 401, "bears none"},
		{"garbage signature with the token", "GET", get, "", map[string]string{HeaderSignature: "v1 s=00", "Authorization": "Bearer " + ce.b.token}, 401, HeaderForwardedBy},
		{"the cluster key", "GET", get, "", map[string]string{HeaderClusterKey: clusterKey, HeaderForwardedBy: "a"}, 401, "no longer send the cluster key"},
		{"the cluster key with the token", "GET", get, "", map[string]string{HeaderClusterKey: clusterKey, "Authorization": "Bearer " + ce.b.token}, 401, "no longer send the cluster key"},
		{"the token", "GET", get, "", map[string]string{"Authorization": "Bearer " + ce.b.token}, 200, ""},
	} {
		st, body := rawCall(t, c.method, c.url, c.body, c.head)
		if st != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %s %s = %d %s; want %d saying %q", c.name, c.method, c.url, st, body, c.status, c.want)
		}
	}
	if log := ce.logB.String(); strings.Count(log, "request claiming to come from a host refused") != 12 || !strings.Contains(log, "forwarded_by=c") {
		t.Errorf("host b's log = %q; want the 12 refusals, naming the host each claims to come from", log)
	}
}

// A program that took host b's address gets a hello, nothing that works,
// and no request: the client is answered 503 host_unreachable saying the
// host at that address could not prove it is b, which host a logs.
func TestForwardToImpostor(t *testing.T) {
	fpB := &fakePool{}
	sessionWorld(fpB)
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	imp := newRecorder(t, nil)
	ce.m.hosts["b"] = ClusterHost{ID: "b", Advertise: imp.ts.URL}
	ce.m.owners["s"] = "b"
	ctx := fwdContext(t)
	_, errGet := ce.a.client.Session(ctx, "s")
	_, errPrompt := ce.a.client.Prompt(ctx, "s", "", "to the impostor", false)
	for _, err := range []error{errGet, errPrompt} {
		if !IsCode(err, CodeHostUnreachable) || !strings.Contains(err.Error(), `could not prove it is host \"b\"`) && !strings.Contains(err.Error(), `could not prove it is host "b"`) {
			t.Errorf("request through a to the impostor error = %v; want %s saying the host at its address could not prove it is b", err, CodeHostUnreachable)
		}
	}
	reqs := imp.requests()
	if len(reqs) == 0 {
		t.Fatal("the impostor got nothing: not even a hello?")
	}
	checkNoKey(t, "the impostor", reqs, clusterKey)
	for _, r := range reqs {
		if !strings.HasPrefix(r.uri, hostHelloPath+"?") || r.header.Get(HeaderSignature) != "" || r.header.Get("Authorization") != "" {
			t.Errorf("the impostor got %s %s (headers %v); want hellos only", r.method, r.uri, r.header)
		}
		// Nothing it got works anywhere.
		for _, to := range []string{ce.a.ts.URL, ce.b.ts.URL} {
			for _, m := range []struct{ method, uri string }{{http.MethodPatch, "/v1/providers/demo"}, {http.MethodPost, "/v1/login-links"}} {
				if st, body := replay(t, to, r, m.method, m.uri); st != http.StatusUnauthorized {
					t.Errorf("the impostor's capture sent as %s %s to %s = %d %s; want 401", m.method, m.uri, to, st, body)
				}
			}
		}
	}
	if log := ce.logA.String(); !strings.Contains(log, "a host did not prove who it is") {
		t.Errorf("host a's log = %q; want the failed proof logged", log)
	}
}

// keyedCluster is a testCluster with a cluster key of its own.
type keyedCluster struct {
	testCluster
	key string
}

func (c keyedCluster) Key() string { return c.key }

// A host with another cluster key fails the hello: nothing is forwarded
// to it. A host asked for by another id says which it is.
func TestHelloProof(t *testing.T) {
	fpB := &fakePool{}
	prompts := promptRecorder(fpB)
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	ce.m.owners["s"] = "b"
	other := newTestEnv(t, fpB, func(c *Config) {
		c.Cluster = keyedCluster{testCluster: testCluster{m: ce.m, self: "b"}, key: "another-cluster-key-0123456789abcdef"}
		c.Token = ce.m.tokens["b"]
	})
	ce.m.hosts["b"] = ClusterHost{ID: "b", Advertise: other.ts.URL}
	_, err := ce.a.client.Prompt(fwdContext(t), "s", "", "to the other cluster", false)
	if !IsCode(err, CodeHostUnreachable) || !strings.Contains(err.Error(), "does not hold this cluster's key") {
		t.Errorf("Prompt through a to a host with another key error = %v; want %s saying it does not hold the key", err, CodeHostUnreachable)
	}
	if got := prompts(); len(got) != 0 {
		t.Errorf("the host with another key got prompts %+v; want none", got)
	}

	ce.m.hosts["b"] = ClusterHost{ID: "b", Advertise: ce.a.ts.URL} // a stands where b should
	_, err = ce.a.client.Prompt(fwdContext(t), "s", "", "to a itself", false)
	if !IsCode(err, CodeHostUnreachable) || !strings.Contains(err.Error(), `this is host`) {
		t.Errorf("Prompt through a to b's address, where host a listens, error = %v; want %s saying it is host a", err, CodeHostUnreachable)
	}
	st, body := rawCall(t, http.MethodGet, ce.b.ts.URL+hostHelloPath+"?host=c&nonce="+strings.Repeat("ab", hostHelloNonceBytes), "", nil)
	if st != http.StatusConflict || !strings.Contains(body, CodeWrongHost) || !strings.Contains(body, `this is host \"b\", not host \"c\"`) {
		t.Errorf("hello of b asked for c = %d %s; want 409 %s saying it is b", st, body, CodeWrongHost)
	}
}

// Past its bound the nonce cache forgets the oldest second's nonces and
// refuses every signature made then, rather than accept them again.
func TestNonceCacheBounded(t *testing.T) {
	c := &nonceCache{max: 4}
	nonce := func(i int) string {
		return strings.Repeat("0", 2*signNonceBytes-2) + hex.EncodeToString([]byte{byte(i)})
	}
	for i := range 4 {
		if err := c.add(100, 100, nonce(i)); err != nil {
			t.Fatalf("add(nonce %d) error = %v", i, err)
		}
	}
	if err := c.add(100, 100, nonce(1)); err != errReplayed {
		t.Errorf("add(nonce 1 again) error = %v; want errReplayed", err)
	}
	if err := c.add(101, 101, nonce(4)); err != nil {
		t.Errorf("add(nonce 4 the next second) error = %v; want it accepted", err)
	}
	if err := c.add(101, 100, nonce(0)); err == nil {
		t.Errorf("add(nonce 0, forgotten) = nil; want it refused")
	}
	if c.n > 4 {
		t.Errorf("cache holds %d nonces; want at most 4", c.n)
	}
	if err := c.add(200, 200, nonce(0)); err != nil || c.n != 1 {
		t.Errorf("add(a nonce much later) = %v, %d kept; want accepted, the expired ones dropped", err, c.n)
	}
}
