package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Environment of the connection flood helper (floodMain): the daemon's
// address, how many connections to open, and how many more per second to
// open afterwards until stdin closes.
const (
	envFlood      = "AGENTPOOL_TEST_FLOOD"
	envFloodCount = "AGENTPOOL_TEST_FLOOD_COUNT"
	envFloodRate  = "AGENTPOOL_TEST_FLOOD_RATE"
)

// floodMain runs the connection flood helper and exits, when the test
// binary is re-executed as one; otherwise it returns. The helper stands
// for a local process without the token: it opens connections and leaves
// them idle, one in twenty sending nothing, one in twenty half a request,
// the others a whole request without a credential (answered 401, then
// kept alive, the way that holds a connection longest). It
// closes a connection the daemon closes. Once all are open it prints
// "ready opened=N failed=N closed=N", then keeps opening the given number
// per second, and exits when its stdin ends (its test is over).
func floodMain() {
	addr := os.Getenv(envFlood)
	if addr == "" {
		return
	}
	count, _ := strconv.Atoi(os.Getenv(envFloodCount))
	rate, _ := strconv.Atoi(os.Getenv(envFloodRate))
	var opened, failed, closed atomic.Int64
	open := func(i int) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			failed.Add(1)
			return
		}
		opened.Add(1)
		switch i % 20 {
		case 0: // nothing
		case 1:
			_, _ = io.WriteString(c, "GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
		default:
			_, _ = io.WriteString(c, "GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		}
		go func() { // drain answers; close when the daemon does
			_, _ = io.Copy(io.Discard, c)
			_ = c.Close()
			closed.Add(1)
		}()
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				open(i)
			}
		}()
	}
	for i := range count {
		next <- i
	}
	close(next)
	wg.Wait()
	fmt.Printf("ready opened=%d failed=%d closed=%d\n", opened.Load(), failed.Load(), closed.Load())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	if rate <= 0 {
		select {}
	}
	for i := 0; ; i++ {
		time.Sleep(time.Second / time.Duration(rate))
		go open(i)
	}
}

// startFlood starts a flood helper of count connections against addr; it
// is ended at the test's end. It returns the helper's "ready" line.
func startFlood(t *testing.T, addr string, count, rate int) <-chan string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), envFlood+"="+addr, envFloodCount+"="+strconv.Itoa(count), envFloodRate+"="+strconv.Itoa(rate))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready") {
				ready <- sc.Text()
			}
		}
	}()
	return ready
}

// openEventStream follows session's events on one connection of its own
// and sends each event's type; the channel closes when the stream ends.
func openEventStream(t *testing.T, d *daemon, session string) <-chan backends.EventType {
	t.Helper()
	tr := &http.Transport{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); tr.CloseIdleConnections() })
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.client.BaseURL+"/v1/sessions/"+session+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.client.Token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("open the event stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("open the event stream: %s", resp.Status)
	}
	types := make(chan backends.EventType, 1024)
	go func() {
		defer close(types)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev backends.Event
			if json.Unmarshal([]byte(data), &ev) == nil {
				select {
				case types <- ev.Type:
				default:
				}
			}
		}
	}()
	return types
}

// timedGet sends an authorized GET of path on a new connection and
// returns how long the answer took; it fails the test past 30 s.
func timedGet(t *testing.T, d *daemon, path string) time.Duration {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.client.BaseURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+d.client.Token)
	begin := time.Now()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	// A new connection may be closed before its request is read, as the
	// flood's are (the daemon cannot tell it from them yet): the owner's
	// client sends a GET again, as httpapi.Client does, and is answered.
	for try := 1; err != nil && try <= 3 && errors.Is(err, syscall.ECONNRESET); try++ {
		t.Logf("authorized GET %s during the flood: %v; sending it again", path, err)
		time.Sleep(time.Duration(try) * 100 * time.Millisecond)
		resp, err = (&http.Client{Transport: tr}).Do(req)
	}
	if err != nil {
		t.Fatalf("authorized GET %s during the flood: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	took := time.Since(begin)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("authorized GET %s during the flood = %s", path, resp.Status)
	}
	return took
}

// TestEndToEndConnectionFlood: local processes without the token hold
// 22,500 connections to the daemon, more than its file limit here;
// the token's owner is still answered, an event stream opened before the
// flood keeps delivering a turn run during it, and a terminal attached
// before it still works.
func TestEndToEndConnectionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon, and opens 21,000 connections")
	}
	const helpers, perHelper = 3, 7500
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# flood\n"})
	// A terminal agent to attach to: cat, echoing what is typed.
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, providersFile),
		[]byte(`{"version": 1, "providers": {"term": {"extends": "pty", "command": ["cat"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, bin, home)
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
	})
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "demo")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`session (\S+) created`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("session new output has no id:\n%s", out)
	}
	id := m[1]
	events := openEventStream(t, d, id)
	actx, acancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer acancel()
	att, err := d.client.Attach(actx, id, "term")
	if err != nil {
		t.Fatalf("attach to the terminal agent: %v", err)
	}
	defer att.Close()
	if err := att.Take(actx); err != nil {
		t.Fatalf("take the terminal's input: %v", err)
	}
	output := make(chan string, 256)
	go func() {
		defer close(output)
		for {
			out, _, err := att.Next(actx)
			if err != nil {
				return
			}
			if len(out) > 0 {
				output <- string(out)
			}
		}
	}()

	addr := strings.TrimPrefix(d.client.BaseURL, "http://")
	var ready []<-chan string
	for range helpers {
		ready = append(ready, startFlood(t, addr, perHelper, 200))
	}
	var during []time.Duration
	deadline := time.After(5 * time.Minute)
	for _, r := range ready {
	wait:
		for {
			select {
			case line := <-r:
				t.Logf("flood helper: %s", line)
				break wait
			case <-deadline:
				t.Fatal("flood helpers not ready after 5 minutes")
			case <-time.After(250 * time.Millisecond):
				during = append(during, timedGet(t, d, "/v1/sessions"))
			}
		}
	}
	var after []time.Duration
	for range 20 {
		after = append(after, timedGet(t, d, "/v1/sessions"))
		time.Sleep(100 * time.Millisecond)
	}
	// The daemon holds a bounded number of descriptors (the caps, the
	// store, the agents), far below its file limit: accept never fails.
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the daemon has %d open files with the flood's connections open", len(fds))
	if len(fds) > 4000 {
		t.Errorf("the daemon has %d open files during the flood; want the connection caps to bound them", len(fds))
	}
	t.Logf("authorized GET /v1/sessions on a new connection while the flood opened connections: %s", latencies(during))
	t.Logf("authorized GET /v1/sessions on a new connection with the flood's connections open: %s", latencies(after))

	// The event stream opened before the flood follows a turn run during it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := d.client.Prompt(ctx, id, "", "add a greeting", false); err != nil {
		t.Fatalf("prompt during the flood: %v", err)
	}
	d.approveNext(id)
	for ended := false; !ended; {
		select {
		case typ, ok := <-events:
			if !ok {
				t.Fatal("the event stream opened before the flood ended")
			}
			ended = typ == backends.EventTurnEnded
		case <-ctx.Done():
			t.Fatal("no turn.ended on the event stream within 60 s of the prompt")
		}
	}
	// The terminal attached before the flood still echoes what is typed.
	if err := att.Input(ctx, []byte("typed-during-flood\r")); err != nil {
		t.Fatalf("type into the terminal attached before the flood: %v", err)
	}
	var seen strings.Builder
	for !strings.Contains(seen.String(), "typed-during-flood") {
		select {
		case out, ok := <-output:
			if !ok {
				t.Fatalf("the terminal attached before the flood ended; it showed %q", seen.String())
			}
			seen.WriteString(out)
		case <-ctx.Done():
			t.Fatalf("the terminal attached before the flood did not echo within 60 s; it showed %q", seen.String())
		}
	}
	metrics := getText(t, d, "/metrics")
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "agentpool_http_connections") {
			t.Log(l)
		}
	}
	if !strings.Contains(metrics, `agentpool_http_connections_closed_total{class="unproven"}`) {
		t.Error("/metrics lacks the count of closed unproven connections")
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	if n := strings.Count(d.out.String(), "API connection limit reached"); n < 1 || n > 2 {
		t.Errorf("daemon logged the connection limit %d times in one flood; want once (at most once a minute)", n)
	}
}

// getText returns the body of an authorized GET of path.
func getText(t *testing.T, d *daemon, path string) string {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, d.client.BaseURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+d.client.Token)
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// latencies summarises durations: count, median and max.
func latencies(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%d tries, median %v, max %v", len(s), s[len(s)/2].Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond))
}
