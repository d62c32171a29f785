package sandbox_test

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// unprivilegedReport is what TestHelperUnprivileged prints.
type unprivilegedReport struct {
	UID         int            `json:"uid"`
	Status      sandbox.Status `json:"status"`
	Escapers    int            `json:"escapers"`
	Survivors   int            `json:"survivors"`
	WriteDenied bool           `json:"write_denied"`
	WriteInside bool           `json:"write_inside"`
	Error       string         `json:"error,omitempty"`
}

// TestUnprivilegedUser runs the manager as an ordinary user (nobody), as
// most users run the daemon: where it cannot create a cgroup it falls back
// to the subreaper and says so, still ends a setsid'd descendant, and
// Landlock still confines files.
func TestUnprivilegedUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to drop to another user")
	}
	agenttest.RequireFeature(t, sandbox.LandlockABI() > 0, "Landlock")
	dir, err := os.MkdirTemp("", "agentpool-unpriv-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "sandbox.test")
	copyFile(t, os.Args[0], exe)
	work := filepath.Join(dir, "work")
	open := filepath.Join(dir, "open")
	for _, d := range []string{work, open} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(d, 0o777)
	}
	cmd := exec.Command(exe, "-test.run=^TestHelperUnprivileged$", "-test.v")
	cmd.Env = append(os.Environ(), "AGENTPOOL_HELPER_UNPRIV="+work+":"+open, "HOME="+dir)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper as nobody: %v\n%s", err, out)
	}
	var rep unprivilegedReport
	for _, line := range strings.Split(string(out), "\n") {
		if js, ok := strings.CutPrefix(line, "REPORT "); ok {
			if err := json.Unmarshal([]byte(js), &rep); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rep.UID != 65534 {
		t.Fatalf("helper did not report as nobody:\n%s", out)
	}
	if rep.Error != "" {
		t.Fatalf("as nobody: %s", rep.Error)
	}
	t.Logf("as nobody: containment %s, Landlock ABI %d, warnings %q", rep.Status.Containment, rep.Status.Landlock, rep.Status.Warnings)
	if rep.Status.Containment == sandbox.ContainSubreaper && len(rep.Status.Warnings) == 0 {
		t.Error("the subreaper fallback is in force without a warning")
	}
	if rep.Escapers != 2 || rep.Survivors != 0 {
		t.Errorf("as nobody: %d of %d escapers survived Kill", rep.Survivors, rep.Escapers)
	}
	if !rep.WriteInside || !rep.WriteDenied {
		t.Errorf("as nobody: write inside ok = %v, write outside denied = %v; want both", rep.WriteInside, rep.WriteDenied)
	}
}

// TestHelperUnprivileged is not a test: run by TestUnprivilegedUser as
// another user, it exercises a Manager and prints a REPORT line.
func TestHelperUnprivileged(t *testing.T) {
	arg := os.Getenv("AGENTPOOL_HELPER_UNPRIV")
	if arg == "" {
		t.Skip("helper")
	}
	work, open, _ := strings.Cut(arg, ":")
	rep := unprivilegedReport{UID: os.Getuid()}
	defer func() {
		b, _ := json.Marshal(rep)
		fmt.Println("REPORT " + string(b))
	}()
	m, err := sandbox.Open(sandbox.Config{Name: treeName(t), Launcher: []string{os.Args[0]}, LauncherEnv: []string{sandbox.EnvLauncher + "=1"}, NoNamespaces: true})
	if err != nil {
		rep.Error = err.Error()
		return
	}
	defer func() { _, _ = m.Sweep(); _ = m.Close(); _ = os.Remove(m.Status().Cgroup) }()
	rep.Status = m.Status()
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: backends.SandboxSpec{Enabled: true}, Worktree: work, Exe: "/bin/sh", PATH: os.Getenv("PATH")})
	j, err := m.NewJail(sandbox.JailConfig{Path: []string{"s", "a", "agent"}, Policy: &pol})
	if err != nil {
		rep.Error = err.Error()
		return
	}
	pidfile := filepath.Join(work, "pids")
	line := fmt.Sprintf(`{ echo x > %s/denied; } 2>/dev/null; echo x > %s/inside; %s`, open, work, escapers(pidfile))
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := j.Prepare(cmd); err != nil {
		rep.Error = err.Error()
		return
	}
	if err := cmd.Start(); err != nil {
		rep.Error = err.Error()
		return
	}
	pids := readPids(t, pidfile, 2)
	rep.Escapers = len(pids)
	if err := j.Kill(); err != nil {
		rep.Error = err.Error()
	}
	_ = cmd.Wait()
	time.Sleep(20 * time.Millisecond)
	for _, pid := range pids {
		if alive(pid) {
			rep.Survivors++
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = j.Release()
	_, err = os.Stat(filepath.Join(open, "denied"))
	rep.WriteDenied = os.IsNotExist(err)
	_, err = os.Stat(filepath.Join(work, "inside"))
	rep.WriteInside = err == nil
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
