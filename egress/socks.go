package egress

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// SOCKS versions, told apart from HTTP by the first byte.
const (
	socks5Version = 0x05
	socks4Version = 0x04
)

// SOCKS5 constants (RFC 1928).
const (
	socksNoAuth       = 0x00
	socksNoAcceptable = 0xff

	socksConnect = 0x01

	socksIPv4   = 0x01
	socksDomain = 0x03
	socksIPv6   = 0x04

	socksSucceeded        = 0x00
	socksGeneralFailure   = 0x01
	socksNotAllowed       = 0x02
	socksNetUnreachable   = 0x03
	socksHostUnreachable  = 0x04
	socksConnRefused      = 0x05
	socksCmdNotSupported  = 0x07
	socksAddrNotSupported = 0x08
)

// serveSOCKS serves a SOCKS5 handshake without authentication and a
// CONNECT request, then the tunnel. BIND and UDP ASSOCIATE are answered
// "command not supported".
func (s *conn) serveSOCKS() {
	var buf [2]byte
	if _, err := io.ReadFull(s.br, buf[:]); err != nil {
		return
	}
	methods := make([]byte, buf[1])
	if _, err := io.ReadFull(s.br, methods); err != nil {
		return
	}
	method := byte(socksNoAcceptable)
	for _, m := range methods {
		if m == socksNoAuth {
			method = socksNoAuth
		}
	}
	if _, err := s.c.Write([]byte{socks5Version, method}); err != nil || method != socksNoAuth {
		return
	}
	t, cmd, rep := s.readSOCKSRequest()
	switch {
	case rep != socksSucceeded:
		s.socksReply(rep, nil)
		return
	case cmd != socksConnect:
		s.log.Debug("egress: SOCKS5 command not supported", keyProto, "socks5", keyCommand, cmd)
		s.socksReply(socksCmdNotSupported, nil)
		return
	}
	up, ref, err := s.open(t, "https", "socks5")
	switch {
	case ref != nil:
		s.socksReply(socksNotAllowed, nil)
		return
	case err != nil:
		s.socksReply(socksCode(err), nil)
		return
	}
	defer s.l.release(up)
	if err := s.socksReply(socksSucceeded, up.LocalAddr()); err != nil {
		return
	}
	s.unlimit()
	splice(s.c, s.br, up)
}

// readSOCKSRequest reads a request's command and destination; rep is the
// failure to reply when the request is malformed or names an address type
// this proxy does not know.
func (s *conn) readSOCKSRequest() (t target, cmd, rep byte) {
	var head [4]byte // VER CMD RSV ATYP
	if _, err := io.ReadFull(s.br, head[:]); err != nil {
		return target{}, 0, socksGeneralFailure
	}
	if head[0] != socks5Version {
		return target{}, 0, socksGeneralFailure
	}
	var host string
	switch head[3] {
	case socksIPv4:
		var a [4]byte
		if _, err := io.ReadFull(s.br, a[:]); err != nil {
			return target{}, 0, socksGeneralFailure
		}
		host = netip.AddrFrom4(a).String()
	case socksIPv6:
		var a [16]byte
		if _, err := io.ReadFull(s.br, a[:]); err != nil {
			return target{}, 0, socksGeneralFailure
		}
		host = netip.AddrFrom16(a).String()
	case socksDomain:
		n, err := s.br.ReadByte()
		if err != nil || n == 0 {
			return target{}, 0, socksGeneralFailure
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(s.br, name); err != nil {
			return target{}, 0, socksGeneralFailure
		}
		host = string(name)
	default:
		return target{}, 0, socksAddrNotSupported
	}
	var port [2]byte
	if _, err := io.ReadFull(s.br, port[:]); err != nil {
		return target{}, 0, socksGeneralFailure
	}
	if head[1] != socksConnect {
		return target{}, head[1], socksSucceeded
	}
	t, err := makeTarget(host, binary.BigEndian.Uint16(port[:]))
	if err != nil {
		s.log.Debug("egress: SOCKS5 bad destination", keyProto, "socks5", keyErr, err)
		return target{}, 0, socksGeneralFailure
	}
	return t, head[1], socksSucceeded
}

// socksReply writes a reply with the bound address bound (zeros if nil).
func (s *conn) socksReply(rep byte, bound net.Addr) error {
	ap := netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	if tcp, ok := bound.(*net.TCPAddr); ok {
		ap = tcp.AddrPort()
	}
	a := ap.Addr().Unmap()
	msg := []byte{socks5Version, rep, 0, socksIPv4}
	if a.Is6() {
		msg[3] = socksIPv6
	}
	msg = append(msg, a.AsSlice()...)
	msg = binary.BigEndian.AppendUint16(msg, ap.Port())
	s.c.SetWriteDeadline(time.Now().Add(s.l.p.cfg.HandshakeTimeout))
	_, err := s.c.Write(msg)
	return err
}

// socksCode returns the SOCKS5 reply for a failed resolution or dial.
func socksCode(err error) byte {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return socksConnRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return socksNetUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH), errors.As(err, &dnsErr), timeout(err):
		return socksHostUnreachable
	}
	return socksGeneralFailure
}
