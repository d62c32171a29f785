// Package egress is the daemon's outbound proxy for confined agents: one
// Proxy serves many unix-socket Listeners, one per agent launch, each with
// its own Policy. A relay inside the agent's network namespace copies every
// TCP connection to its listener, so a Listener speaks the three ways a
// program asks a proxy for a connection, told apart by the first byte: HTTP
// CONNECT, plain HTTP with an absolute URI, and SOCKS5 (no authentication,
// CONNECT only).
//
// The proxy resolves names itself, checks every resolved address against
// the policy and dials the address it checked, never the name again: a name
// that resolves to a loopback, private, link-local or otherwise non-public
// address is refused unless an entry names that address, so a DNS answer
// cannot turn an allowed name into a door to the host's own services. The
// daemon's own listen addresses (Config.Deny) are refused unless an entry
// names that exact address and port.
//
// Each refusal is answered to the agent in its protocol (a 403 whose one
// line names the host, the reason and the entry that would allow it, or
// SOCKS5 reply 0x02), logged, counted and handed to Config.OnRefused.
package egress
