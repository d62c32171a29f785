package agenttest

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// greeterMain is the HelperGreeter process: it listens on TCP address
// args[0], creates the file args[2] (when given) once it listens, and
// answers every connection with args[1] and a hang-up, until killed.
func greeterMain(args []string) {
	if len(args) < 2 || len(args) > 3 {
		fmt.Fprintln(os.Stderr, "greeter: usage: address greeting [readyfile]")
		os.Exit(2)
	}
	l, err := net.Listen("tcp", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "greeter:", err)
		os.Exit(1)
	}
	if len(args) == 3 {
		if err := os.WriteFile(args[2], nil, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "greeter:", err)
			os.Exit(1)
		}
	}
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "greeter:", err)
			os.Exit(1)
		}
		go greet(c, args[1])
	}
}

// greet writes greeting to c and hangs up, reading what the peer sent
// until it hangs up too (a peer's unread bytes would make the close a
// reset, which could lose the greeting).
func greet(c net.Conn, greeting string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(greetTimeout))
	_, _ = io.WriteString(c, greeting)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, c)
}

// greetTimeout bounds one connection of a greeter.
const greetTimeout = 10 * time.Second
