package egress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Listener is the unix socket one agent launch reaches the proxy through.
type Listener struct {
	p      *Proxy
	ln     *net.UnixListener
	path   string
	file   os.FileInfo // the socket file made, removed by Close if still there
	meta   Meta
	log    *slog.Logger
	rules  atomic.Pointer[rules]
	slots  chan struct{} // one per connection served
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	conns  map[io.Closer]struct{} // live connections, both sides
	closed bool

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Listen makes a unix socket at path, mode 0600, and serves it with pol
// until Listener.Close or Proxy.Close. A stale socket at path (one nothing
// listens on) is replaced; a symbolic link, any other file, or a socket in
// use is not, and makes Listen fail. meta is logged with each connection
// and copied into refusals.
func (p *Proxy) Listen(path string, pol Policy, meta Meta) (*Listener, error) {
	r, err := compile(pol)
	if err != nil {
		return nil, fmt.Errorf("egress: listen %s: %w", path, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	ln, file, err := listenUnix(path)
	if err != nil {
		return nil, fmt.Errorf("egress: listen %s: %w", path, err)
	}
	l := &Listener{
		p: p, ln: ln, path: path, file: file, meta: meta,
		log:   p.log.With(keySession, meta.Session, keyProvider, meta.Provider),
		slots: make(chan struct{}, p.cfg.MaxConns),
		conns: map[io.Closer]struct{}{},
	}
	l.rules.Store(r)
	l.ctx, l.cancel = context.WithCancel(p.ctx)
	p.listeners[l] = struct{}{}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// Path returns the path of the listener's socket.
func (l *Listener) Path() string { return l.path }

// SetPolicy replaces the policy for the connections accepted from now on
// (and the next requests of kept-alive HTTP connections); tunnels already
// open stay open. An invalid policy is refused and the previous one kept.
func (l *Listener) SetPolicy(pol Policy) error {
	r, err := compile(pol)
	if err != nil {
		return fmt.Errorf("egress: %s: %w", l.path, err)
	}
	l.rules.Store(r)
	return nil
}

// Close stops accepting, closes every live connection of the listener,
// removes its socket and waits for its goroutines. It is idempotent.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		conns := l.conns
		l.conns = nil
		l.mu.Unlock()
		l.cancel()
		err := l.ln.Close()
		if cur, e := os.Lstat(l.path); e == nil && os.SameFile(cur, l.file) {
			if e := os.Remove(l.path); e != nil && err == nil {
				err = e
			}
		}
		for c := range conns {
			c.Close()
		}
		l.wg.Wait()
		l.p.mu.Lock()
		delete(l.p.listeners, l)
		l.p.mu.Unlock()
		if err != nil {
			l.closeErr = fmt.Errorf("egress: close %s: %w", l.path, err)
		}
	})
	return l.closeErr
}

// track records c as live, or reports false when the listener is closed.
func (l *Listener) track(c io.Closer) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

// release closes c and forgets it.
func (l *Listener) release(c io.Closer) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
}

// serve accepts connections until the listener is closed.
func (l *Listener) serve() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.log.Warn("egress: accept", keyErr, err, keyRetry, backoff)
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		select {
		case l.slots <- struct{}{}:
		default:
			l.p.busy.Add(1)
			l.log.Warn("egress: too many connections, closing a new one", keyMax, cap(l.slots))
			c.Close()
			continue
		}
		if !l.track(c) {
			c.Close()
			<-l.slots
			return
		}
		l.wg.Add(1)
		go l.handle(c)
	}
}

// handle serves one connection, then frees its slot.
func (l *Listener) handle(c net.Conn) {
	defer func() {
		if v := recover(); v != nil {
			l.log.Error("egress: panic serving a connection", keyPanic, v, keyStack, string(debug.Stack()))
		}
		l.release(c)
		<-l.slots
		l.wg.Done()
	}()
	newConn(l, c).serve()
}

// listenUnix makes a unix socket at path, mode 0600, without a moment in
// which another user could connect to it: it binds in a new private
// directory beside path, sets the mode, and links the socket into place
// (link never replaces a file, nor follows a symbolic link).
func listenUnix(path string) (*net.UnixListener, os.FileInfo, error) {
	if err := clearStale(path); err != nil {
		return nil, nil, err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	tmpDir := filepath.Join(filepath.Dir(path), "."+hex.EncodeToString(b[:]))
	if err := os.Mkdir(tmpDir, 0o700); err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (*net.UnixListener, os.FileInfo, error) {
		ln.Close()
		return nil, nil, err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fail(fmt.Errorf("%s appeared while the socket was made: %w", path, err))
		}
		return fail(err)
	}
	file, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	return ln, file, nil
}

// clearStale removes a socket at path that nothing listens on; it fails
// on a symbolic link, a file of another kind, and a socket in use.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link; refusing to follow or replace it", path)
	case fi.Mode()&fs.ModeSocket == 0:
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s is a socket in use; refusing to replace it", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: checking the old socket: %w", path, err)
	}
	return os.Remove(path)
}
