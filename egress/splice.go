package egress

import (
	"bufio"
	"io"
	"net"
)

// splice copies between the agent's connection a (whose first bytes may
// already be in ar) and the target's b, both ways, until both directions
// end. A direction that ends cleanly half-closes its destination, so the
// other keeps flowing; one that fails closes both connections.
func splice(a net.Conn, ar *bufio.Reader, b net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(b, a, ar)
	}()
	pipe(a, b, nil)
	<-done
}

// pipe copies src (after what pending holds) to dst.
func pipe(dst, src net.Conn, pending *bufio.Reader) {
	var err error
	if pending != nil && pending.Buffered() > 0 {
		var head []byte
		head, err = pending.Peek(pending.Buffered())
		if err == nil {
			_, err = dst.Write(head)
			_, _ = pending.Discard(len(head))
		}
	}
	if err == nil {
		_, err = io.Copy(dst, src)
	}
	if err == nil {
		err = closeWrite(dst)
	}
	if err != nil {
		dst.Close()
		src.Close()
	}
}

// closeWrite half-closes c when it can, and closes it otherwise.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
