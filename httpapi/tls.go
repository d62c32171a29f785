package httpapi

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
)

// Errors of the TLS and address helpers.
var (
	// ErrNoTLS is returned by ListenCheckTLS for an address that is not
	// loopback without a certificate and its key: tokens would cross the
	// network in clear.
	ErrNoTLS = errors.New("refusing to listen on a non-loopback address without TLS (a certificate and its key)")
	// ErrAdvertise is returned by CheckAdvertiseURL for a URL other hosts
	// must not be sent to.
	ErrAdvertise = errors.New("bad advertise URL")
)

// ListenCheckTLS is ListenCheck for a daemon that may serve TLS with the
// certificate and key in certFile and keyFile ("" for plain HTTP): an
// address that is not loopback needs a token (ErrInsecureListen) and TLS
// (ErrNoTLS); the certificate and key, when given, must load together.
func ListenCheckTLS(addr, token, certFile, keyFile string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if (certFile == "") != (keyFile == "") {
		return fmt.Errorf("listen on %q: a TLS certificate needs its key and a key its certificate (got certificate %q, key %q)", addr, certFile, keyFile)
	}
	if certFile != "" {
		if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
			return fmt.Errorf("listen on %q: TLS certificate %s and key %s: %w", addr, certFile, keyFile, err)
		}
	}
	if isLoopback(host) {
		return nil
	}
	if token == "" {
		return fmt.Errorf("listen on %q: %w", addr, ErrInsecureListen)
	}
	if certFile == "" {
		return fmt.Errorf("listen on %q: %w", addr, ErrNoTLS)
	}
	return nil
}

// CheckAdvertiseURL checks the URL a host gives the others to reach it
// at: http or https, https unless its host is a loopback IP or localhost,
// a host, and no user, query or fragment. It returns the URL parsed.
func CheckAdvertiseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("advertise URL %q: %w: %w", raw, ErrAdvertise, err)
	}
	bad := func(why string) error { return fmt.Errorf("advertise URL %q: %w: %s", raw, ErrAdvertise, why) }
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, bad("the scheme must be https (or http on loopback)")
	case u.Hostname() == "":
		return nil, bad("it names no host")
	case u.User != nil:
		return nil, bad("it must not carry a user or password")
	case u.RawQuery != "" || u.ForceQuery:
		return nil, bad("it must not have a query")
	case u.Fragment != "":
		return nil, bad("it must not have a fragment")
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		return nil, bad("a host that is not loopback must be reached over https")
	}
	return u, nil
}

// TLSConfig returns the server TLS config of the API for the certificate
// and key in certFile and keyFile: TLS 1.2 at least, and HTTP/1.1 only,
// as the terminal's WebSocket upgrades need.
func TLSConfig(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}, nil
}

// ServeTLS serves hs (from HTTPServer) on ln over TLS with the certificate
// and key in certFile and keyFile (see TLSConfig). It returns as
// http.Server.Serve does.
func ServeTLS(hs *http.Server, ln net.Listener, certFile, keyFile string) error {
	conf, err := TLSConfig(certFile, keyFile)
	if err != nil {
		return err
	}
	hs.TLSConfig = conf
	var protos http.Protocols
	protos.SetHTTP1(true) // as over plain HTTP: no HTTP/2
	hs.Protocols = &protos
	return hs.ServeTLS(ln, "", "")
}
