package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/httpapi"
	"golang.org/x/sys/unix"
)

// Files of the data directory that the client reads.
const (
	// daemonFileName holds the running daemon's address and pid.
	daemonFileName = "daemon.json"
	// tokenFileName holds the API token (mode 0600).
	tokenFileName = "token"
)

// Environment variables that override the data directory's files.
const (
	envAddr  = "AGENTPOOL_ADDR"
	envToken = "AGENTPOOL_TOKEN"
)

// clientUsage lists the client commands, for the binary's usage text.
const clientUsage = `  providers    list, enable, disable, remove and refresh the agent providers; add one from the catalog
  session      new, list, show, fork, close, merge, review, push, pr, setup, move, budget, config, mode and commands: sessions, forks, branches, reviews, pull requests, hosts, budgets, agents' models and modes
  prompt       send a prompt to a session's agent and stream the turn
  events       print a session's events (--follow to keep reading)
  attempt      run one prompt as several sessions side by side, compare, pick one
  diff         show what a session (or one turn) changed
  restore      put a session's worktree back to a turn's checkpoint
  cancel       cancel a session's running turn
  usage        show tokens, cost and context used, per provider and session, and budgets
  attach       show a terminal agent's screen and type into it (Ctrl-] detaches)
  permissions  list and answer pending permission requests; list the remembered "always" answers and forget them
  ps           show the pool: warm agents, pids, state, memory
  hosts        list the daemons sharing this daemon's store, with their heartbeats and load
  evict        stop a session's warm agent now (it starts again on the next prompt)
  prune        forget closed sessions older than an age, and their empty branches
  open         print a one-time login link to the web page (--browser opens it)
  trust        show a repository's .agentpool.json and trust it to run (--list, --revoke)
  logins       list the web pages logged in; revoke ID|--all logs them out
  login        log an agent in (the agent keeps its credentials; the daemon never sees them)
  mcp          serve the Model Context Protocol on stdio, so that another agent can delegate work to the pool
  acp          serve the pool's sessions to an editor (Zed, JetBrains, Neovim) as an ACP agent on stdio
  daemons      list your running daemons (data directory, address, pid) and mark the one this directory talks to
`

// ClientEnv says where the client finds the daemon.
type ClientEnv struct {
	// Home is the data directory, holding daemon.json and token.
	Home string
	// HomeFrom says how Home was chosen (see findHome), for messages; ""
	// when it was given.
	HomeFrom string
	// Daemons, when set, is the per-user directory of the running
	// daemons' pointers (see listDaemons), among which the client picks
	// when Home has no running daemon and was not chosen explicitly, and
	// which it names when several run.
	Daemons string
	// Cwd is the current directory, "" when unknown: the client picks a
	// listed daemon whose data directory is at or above it.
	Cwd string
	// Addr and Token, when set, override daemon.json and the token file.
	Addr, Token string
	// Self is the command as the user invoked it ("./bin/agentpool"), for
	// the hints the client prints; "" means "agentpool".
	Self string
}

// newClientEnv returns the ClientEnv for data directory home, with the
// AGENTPOOL_ADDR and AGENTPOOL_TOKEN overrides read through getenv.
func newClientEnv(home string, getenv func(string) string) ClientEnv {
	return ClientEnv{Home: home, Addr: getenv(envAddr), Token: getenv(envToken)}
}

// defaultSelf is the command name hints use when the invocation is unknown.
const defaultSelf = "agentpool"

// invokedAs returns the command as the user typed it, so that a hint can
// be pasted back into the shell: argv0 itself ("./bin/agentpool", or
// "agentpool" when the shell found it on PATH), quoted for a POSIX shell
// when it needs to be, or "agentpool" when argv0 is empty.
func invokedAs(argv0 string) string {
	if argv0 == "" {
		return defaultSelf
	}
	return shellQuote(argv0)
}

// shellQuote quotes s for a POSIX shell, unless it needs no quoting.
func shellQuote(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./+,:@%=~", r))
	}) < 0
	if safe && !strings.HasPrefix(s, "~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// daemonInfo is the content of daemon.json.
type daemonInfo struct {
	// Addr is host:port for a daemon serving HTTP, an https:// URL for
	// one serving HTTPS.
	Addr string `json:"addr"`
	PID  int    `json:"pid"`
	// Cert is, for a daemon serving HTTPS, its certificate file, which
	// the CLI trusts besides the system's authorities (a daemon's own
	// certificate is often self-signed).
	Cert string `json:"cert,omitempty"`
}

// port is the port of d.Addr, "" when it has none.
func (d daemonInfo) port() string {
	hostport := d.Addr
	if u, err := url.Parse(d.Addr); err == nil && u.Host != "" {
		hostport = u.Host
	}
	_, port, _ := net.SplitHostPort(hostport)
	return port
}

// readDaemonFile reads home/daemon.json. A missing file is an error
// wrapping fs.ErrNotExist; a file that cannot be trusted (see
// trustChecker: another user owns it or can write it, or its directory) is
// refused with the reason, so that a planted file never chooses where the
// client sends its token.
func readDaemonFile(home string) (daemonInfo, error) {
	path := filepath.Join(home, daemonFileName)
	b, err := readTrusted(path)
	if err != nil {
		return daemonInfo{}, err
	}
	var d daemonInfo
	if err := json.Unmarshal(b, &d); err != nil {
		return daemonInfo{}, fmt.Errorf("%s is not valid: %w", path, err)
	}
	if d.Addr == "" {
		return daemonInfo{}, fmt.Errorf("%s is not valid: no address", path)
	}
	return d, nil
}

// alive says whether the daemon's process may still run: it does, or its
// pid is unknown.
func (d daemonInfo) alive() bool {
	return pidAlive(d.PID) // pointer.go
}

// writeDaemonFile records d, the daemon's address and pid (and, serving
// HTTPS, its certificate file) in home/daemon.json, atomically, for
// clients to find.
func writeDaemonFile(home string, d daemonInfo) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(home, daemonFileName+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", daemonFileName, err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), filepath.Join(home, daemonFileName))
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", daemonFileName, werr)
	}
	return nil
}

// cli is one run of a client command.
type cli struct {
	env   ClientEnv
	stdin io.Reader
	in    *bufio.Reader
	// reading is the stdin read in flight, when readLine returned before
	// it ended (see cli_readline.go).
	reading chan lineRead
	stdout  io.Writer
	stderr  io.Writer
	// inTTY and outTTY say whether stdin and stdout are terminals: y/n
	// questions need the first, colours the second.
	inTTY, outTTY bool
	api           *httpapi.Client
	// confine is the daemon's confinement, when a listing asked for it.
	confine *sandbox.Status
}

// runClient runs client command cmd with args. It returns handled false
// for a command it does not know, and the command's error otherwise.
func runClient(ctx context.Context, cmd string, args []string, env ClientEnv, stdin io.Reader, stdout, stderr io.Writer) (bool, error) {
	c := &cli{env: env, stdin: stdin, stdout: stdout, stderr: stderr, inTTY: isTerminal(stdin), outTTY: isTerminal(stdout)}
	return c.run(ctx, cmd, args)
}

func (c *cli) run(ctx context.Context, cmd string, args []string) (bool, error) {
	var err error
	switch cmd {
	case "providers":
		err = c.providers(ctx, args)
	case "session", "sessions":
		err = c.session(ctx, args)
	case "prompt":
		err = c.prompt(ctx, args)
	case "events":
		err = c.events(ctx, args)
	case "diff":
		err = c.diff(ctx, args)
	case "restore":
		err = c.restore(ctx, args)
	case "cancel":
		err = c.cancel(ctx, args)
	case "usage":
		err = c.usageCmd(ctx, args) // cli_usage.go
	case "permissions":
		err = c.permissions(ctx, args)
	case "ps":
		err = c.ps(ctx, args)
	case "hosts":
		err = c.hostsCmd(ctx, args) // cli_hosts.go
	case "evict":
		err = c.evict(ctx, args)
	case "prune":
		err = c.prune(ctx, args) // cli_prune.go
	case "attach":
		err = c.attach(ctx, args)
	case "open":
		err = c.open(ctx, args)
	case "trust":
		err = c.trust(ctx, args) // cli_trust.go
	case "logins":
		err = c.logins(ctx, args) // cli_logins.go
	case "login":
		err = c.loginAgent(ctx, args) // cli_login.go
	case "mcp":
		err = c.mcpServe(ctx, args) // cli_mcpserver.go
	case "acp":
		err = c.acpServe(ctx, args) // cli_acp.go
	case "attempt", "attempts":
		err = c.attempt(ctx, args) // cli_attempt.go
	case "daemons":
		err = c.daemons(args) // cli_daemons.go
	default:
		return false, nil
	}
	var ae *httpapi.Error
	var ue *httpapi.UnprovenError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED) && c.api != nil:
		err = fmt.Errorf("cannot reach the daemon at %s (is it running? start it with: %s serve): %w", c.api.BaseURL, c.self(), err)
	case errors.As(err, &ue) && !httpapi.IsCode(err, httpapi.CodeUnauthorized) && c.api != nil:
		// Said once, plainly: the chain's own text repeats the request.
		err = fmt.Errorf("the program answering at %s is not the daemon of %s: it %s, so the token was not sent. "+
			"The daemon may have stopped and another program taken its port; start the daemon with: %s serve", c.api.BaseURL, c.env.Home, ue.Reason, c.self())
	case errors.As(err, &ue) && c.api != nil && c.api.Token != "":
		err = c.unknownToken(err)
	case errors.As(err, &ae) && ae.Code == httpapi.CodeUnauthorized && c.api != nil:
		err = c.unauthorized(err)
	}
	return true, helpOK(err)
}

// self is the command as the user invoked it, for hints.
func (c *cli) self() string {
	if c.env.Self != "" {
		return c.env.Self
	}
	return defaultSelf
}

// unauthorized explains a 401: which token was sent, and what to set.
func (c *cli) unauthorized(err error) error {
	var sent string
	switch {
	case c.env.Token != "":
		sent = "refused the token in $" + envToken
	case c.api.Token != "":
		sent = "refused the token of " + filepath.Join(c.env.Home, tokenFileName)
	default:
		sent = "needs a token, and no token was sent (" + filepath.Join(c.env.Home, tokenFileName) + " does not exist)"
	}
	hint := fmt.Sprintf("set %s to the content of the token file in that daemon's data directory", envToken)
	if c.env.Addr != "" {
		hint += fmt.Sprintf(" (%s alone is not enough), or unset %s to use the daemon of %s", envAddr, envAddr, c.env.Home)
	}
	return fmt.Errorf("the daemon at %s %s: %s: %w", c.api.BaseURL, sent, hint, err)
}

// unknownToken explains a 401 to the hello: the program at the daemon's
// address does not know the token, which was not sent. It is another
// daemon, or a program that took a stopped daemon's port.
func (c *cli) unknownToken(err error) error {
	token := filepath.Join(c.env.Home, tokenFileName)
	if c.env.Token != "" {
		token = "$" + envToken
	}
	hint := fmt.Sprintf("if it is another daemon, set %s to the content of the token file in its data directory", envToken)
	if c.env.Addr != "" {
		hint += fmt.Sprintf(" (%s alone is not enough), or unset %s to use the daemon of %s", envAddr, envAddr, c.env.Home)
	}
	return &explained{msg: fmt.Sprintf("the program answering at %s does not know the token of %s, so the token was not sent: "+
		"it is another daemon, or a program that took the port of a daemon that stopped (start that with: %s serve); %s",
		c.api.BaseURL, token, c.self(), hint), err: err}
}

// explained is an error said once, plainly, in place of its chain's
// text (which repeats the request); it still unwraps to the chain.
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

// isTerminal says whether r or w is a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(file.Fd()), unix.TCGETS)
	return err == nil
}

// client returns the API client, finding the daemon on first use.
func (c *cli) client() (*httpapi.Client, error) {
	if c.api != nil {
		return c.api, nil
	}
	addr, token := c.env.Addr, c.env.Token
	if addr == "" || token == "" {
		if err := c.checkHome(); err != nil {
			return nil, err
		}
	}
	var cert string
	if addr == "" {
		d, err := c.findDaemon() // cli_daemons.go
		if err != nil {
			return nil, err
		}
		addr, cert = d.Addr, d.Cert
	}
	if token == "" {
		b, err := readTrusted(filepath.Join(c.env.Home, tokenFileName))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read the API token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	c.api = &httpapi.Client{BaseURL: base, Token: token}
	if cert != "" && strings.HasPrefix(base, "https://") {
		hc, err := trustingClient(cert)
		if err != nil {
			return nil, err
		}
		c.api.HTTP = hc
	}
	return c.api, nil
}

// freshClient finds the daemon anew and returns a client of it, for a
// long-running server (agentpool mcp, agentpool acp): a daemon started, or
// restarted on another port, after the server started is found.
func (c *cli) freshClient() (*httpapi.Client, error) {
	cc := *c
	cc.api = nil
	return cc.client()
}

// trustingClient is an HTTP client that trusts the certificates of the
// PEM file cert (the daemon's own, named by its daemon.json) besides the
// system's authorities. The file is read only if this user owns it and
// no one else may write it (see readTrusted).
func trustingClient(cert string) (*http.Client, error) {
	b, err := readTrusted(cert)
	if err != nil {
		return nil, fmt.Errorf("read the daemon's certificate: %w", err)
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("the daemon's certificate %s holds no PEM certificate", cert)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}, nil
}

// flagSet makes the flag set of a command; usage is its synopsis and what
// it does.
func (c *cli) flagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s %s\n", c.self(), usage)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(fs.Output(), "\nFlags:")
			printFlags(fs)
		}
	}
	return fs
}

// printFlags is flag.PrintDefaults with the flags spelled as the usage
// lines and the docs spell them, --name (the flag package accepts both).
func printFlags(fs *flag.FlagSet) {
	w := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		if !zeroDefault(f) {
			if name == "string" {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %v)", f.DefValue)
			}
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
	})
}

// zeroDefault says whether f's default is its type's zero value, which
// the help does not repeat.
func zeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

// errShownHelp ends a command after its help was printed.
var errShownHelp = errors.New("help shown")

// parse parses args, flags and positional arguments in any order ("--"
// ends the flags), and checks the count of positionals is within
// [minPos, maxPos] (maxPos < 0: no limit). -h and --help print the usage
// to stdout and return errShownHelp.
func (c *cli) parse(fs *flag.FlagSet, args []string, minPos, maxPos int) ([]string, error) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(c.stdout)
			fs.Usage()
			return nil, errShownHelp
		}
	}
	var pos []string
	for len(args) > 0 {
		if args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		if err := fs.Parse(args); err != nil {
			return nil, fmt.Errorf("%s: %w", fs.Name(), err)
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...) // Parse ate the "--"
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < minPos || (maxPos >= 0 && len(pos) > maxPos) {
		fs.Usage()
		return nil, fmt.Errorf("%s: wrong number of arguments", fs.Name())
	}
	return pos, nil
}

// helpOK turns errShownHelp into success.
func helpOK(err error) error {
	if errors.Is(err, errShownHelp) {
		return nil
	}
	return err
}

// subcommand splits args into a subcommand and its arguments, or prints
// the group's usage.
func (c *cli) subcommand(group, usage string, args []string) (string, []string, error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := c.stderr
		if len(args) > 0 {
			w = c.stdout
		}
		fmt.Fprintf(w, "Usage: %s %s <command>\n\nCommands:\n%s", c.self(), group, usage)
		if len(args) == 0 {
			return "", nil, fmt.Errorf("%s: a command is required", group)
		}
		return "", nil, errShownHelp
	}
	return args[0], args[1:], nil
}

// printJSON writes v as indented JSON.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// progress writes a progress note to stderr (no newline).
func (c *cli) progress(format string, args ...any) {
	fmt.Fprintf(c.stderr, format, termArgs(args)...)
}
