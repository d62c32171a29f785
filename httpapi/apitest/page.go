package apitest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// ErrPageProof is returned by PageBearer when what answered at base could
// not prove it knows the page's key (it is not the daemon logged in to).
var ErrPageProof = errors.New("the daemon's proof does not verify")

// PageBearer does what the web page does with its key at each start: with
// the key of the page credential (its SHA-256) it asks base for a
// challenge (POST /v1/page-auth/challenge), checks the daemon's proof,
// answers the challenge (POST /v1/page-auth) and returns the run bearer.
// It implements the protocol independently of the server, for tests that
// need a page principal without a browser. hc nil means
// http.DefaultClient. A refusal is an error carrying the status.
func PageBearer(ctx context.Context, hc *http.Client, base, id, credential string) (string, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	k := sha256.Sum256([]byte(credential))
	nb := make([]byte, 32)
	if _, err := rand.Read(nb); err != nil {
		return "", fmt.Errorf("nonce: %w", err)
	}
	nonce := hex.EncodeToString(nb)
	var ch struct{ Proof, Challenge string }
	if err := pagePost(ctx, hc, base+"/v1/page-auth/challenge", map[string]string{"id": id, "nonce": nonce}, &ch); err != nil {
		return "", err
	}
	if !hmac.Equal([]byte(ch.Proof), []byte(pageMAC(k[:], "agentpool page hello v1\x00"+nonce+"\x00"+id))) {
		return "", ErrPageProof
	}
	var auth struct{ Bearer string }
	mac := pageMAC(k[:], "agentpool page auth v1\x00"+ch.Challenge+"\x00"+id)
	if err := pagePost(ctx, hc, base+"/v1/page-auth", map[string]string{"id": id, "challenge": ch.Challenge, "mac": mac}, &auth); err != nil {
		return "", err
	}
	return auth.Bearer, nil
}

// pageMAC is hex(HMAC-SHA256(key, msg)).
func pageMAC(key []byte, msg string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// pagePost posts body as JSON to url and decodes a 200 answer into out.
func pagePost(ctx context.Context, hc *http.Client, url string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("page auth: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: HTTP %d: %s", url, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("POST %s answer: %w", url, err)
	}
	return nil
}
