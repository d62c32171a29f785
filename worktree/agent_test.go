package worktree

import (
	"bytes"
	"compress/zlib"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// A confined agent's git, as the tests play it, in a session worktree
// with a private git view: inside a mount namespace that shows the view
// as the launcher mounts it (the common directory read-only, with an
// overlay on its objects, the view's refs and logs bound on the branch's
// ref and reflog directories, and the worktree's admin directory
// writable; `unshare -Urm`), or where the machine allows no such
// namespace, with git's object directory redirected to the view's upper
// directory (the real store as an alternate) and the private ref written
// by hand: what the overlay and the bind mount amount to.
// AGENTPOOL_TEST_NO_OVERLAY=1 forces the second way.

// overlayWorks reports whether an unprivileged overlay can be mounted in
// a user and mount namespace of the test's own.
var overlayWorks = sync.OnceValue(func() bool {
	if os.Getenv("AGENTPOOL_TEST_NO_OVERLAY") != "" {
		return false
	}
	dir, err := os.MkdirTemp("", "agentpool-overlay-probe-")
	if err != nil {
		return false
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"l", "u", "w", "m"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return false
		}
	}
	cmd := exec.Command("unshare", "-Urm", "sh", "-c",
		`mount -t overlay overlay -o lowerdir="$1/l",upperdir="$1/u",workdir="$1/w",userxattr "$1/m"`, "probe", dir)
	return cmd.Run() == nil
})

// agent plays the agent of one worktree.
type agent struct {
	t       testing.TB
	wt      Worktree
	p       GitPaths
	overlay bool
}

// newAgent returns the agent of wt, whose view m must have made.
func newAgent(t testing.TB, m *Manager, wt Worktree) *agent {
	t.Helper()
	p, err := m.GitPaths(context.Background(), wt)
	if err != nil {
		t.Fatalf("GitPaths(%s) error = %v", wt.Session, err)
	}
	if !p.View.Set() {
		t.Fatalf("GitPaths(%s).View is zero; want the worktree's private git view", wt.Session)
	}
	return &agent{t: t, wt: wt, p: p, overlay: overlayWorks()}
}

// mode names how the agent runs, for messages.
func (a *agent) mode() string {
	if a.overlay {
		return "overlay"
	}
	return "redirected object directory"
}

// sh runs script with bash in the worktree, as the agent, with env, and
// returns its output; the test fails if it does. The script sees
// $COMMON (the common git directory as its view shows it), $REF (the
// branch's loose ref file as it writes it), $OBJECTS (where its writes
// to the object store land as its view shows them) and $HEAD (the
// agent's branch tip as a revision).
func (a *agent) sh(script string, env ...string) string {
	a.t.Helper()
	out, err := a.try(script, env...)
	if err != nil {
		a.t.Fatalf("agent (%s): %v\n%s\nscript:\n%s", a.mode(), err, out, script)
	}
	return out
}

// try is sh without failing the test.
func (a *agent) try(script string, env ...string) (string, error) {
	var out bytes.Buffer
	cmd := a.command(script, env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// command is the command that runs script as the agent (see sh).
func (a *agent) command(script string, env ...string) *exec.Cmd {
	v := a.p.View
	var cmd *exec.Cmd
	vars := []string{"COMMON=" + a.p.CommonDir}
	if a.overlay {
		mount := `set -e
mount --bind "$COMMON" "$COMMON"
mount -o remount,bind,ro "$COMMON"
mount -t overlay overlay -o lowerdir="$COMMON/objects",upperdir="$UPPER",workdir="$WORK",userxattr "$COMMON/objects"
mount --bind "$VREFS" "$REFDIR"
mount --bind "$VLOGS" "$LOGDIR"
mount --bind "$ADMIN" "$ADMIN"
mount -o remount,bind,rw "$ADMIN"
`
		cmd = exec.Command("unshare", "-Urm", "bash", "-c", mount+script)
		vars = append(vars, "ADMIN="+a.p.AdminDir, "UPPER="+v.ObjectsUpper, "WORK="+v.ObjectsWork, "VREFS="+v.Refs, "REFDIR="+a.p.RefDir(),
			"VLOGS="+v.Logs, "LOGDIR="+a.p.LogDir(), "REF="+filepath.Join(a.p.RefDir(), filepath.Base(v.Ref)),
			"OBJECTS="+filepath.Join(a.p.CommonDir, "objects"), "HEAD=HEAD")
	} else {
		cmd = exec.Command("bash", "-c", "set -e\n"+script)
		head := strings.TrimSpace(readFile(a.t, v.Refs, filepath.Base(v.Ref)))
		vars = append(vars, "GIT_OBJECT_DIRECTORY="+v.ObjectsUpper, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+quoteAlternate(filepath.Join(a.p.CommonDir, "objects")),
			"REF="+v.Ref, "OBJECTS="+v.ObjectsUpper, "HEAD="+head)
	}
	cmd.Dir = a.wt.Path
	cmd.Env = append(append(append(os.Environ(), testIdentity...), vars...), env...)
	return cmd
}

// commit commits every change of the worktree, with files written first,
// as the agent's git commit does, and returns the new commit.
func (a *agent) commit(msg string, files map[string]string) string {
	a.t.Helper()
	for name, content := range files {
		writeFile(a.t, a.wt.Path, name, content)
	}
	a.commitIndex(msg, "git add -A")
	return a.ref()
}

// commitIndex runs prep (with env), then commits the index on the
// agent's branch.
func (a *agent) commitIndex(msg, prep string, env ...string) {
	a.t.Helper()
	env = append(env, "MSG="+msg)
	if a.overlay {
		a.sh(prep+"\ngit commit -q --allow-empty -m \"$MSG\"", env...)
		return
	}
	a.sh(prep+"\ntree=$(git write-tree)\nc=$(git commit-tree \"$tree\" -p \"$HEAD\" -m \"$MSG\")\necho \"$c\" > \"$REF\"", env...)
}

// setRef moves the agent's branch to id, as git reset does.
func (a *agent) setRef(id string) {
	a.t.Helper()
	if a.overlay {
		a.sh(`git update-ref "refs/heads/$BRANCH" "$ID"`, "BRANCH="+a.p.Branch, "ID="+id)
		return
	}
	writeFile(a.t, a.p.View.Refs, filepath.Base(a.p.View.Ref), id+"\n")
}

// ref is the agent's branch tip, as its private ref holds it.
func (a *agent) ref() string {
	a.t.Helper()
	return strings.TrimSpace(readFile(a.t, a.p.View.Refs, filepath.Base(a.p.View.Ref)))
}

// rewrite puts content under the id of an object, as a loose object
// replaced by rename in the agent's view of the object store.
func (a *agent) rewrite(id, content string) {
	a.t.Helper()
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	fmt.Fprintf(w, "blob %d\x00%s", len(content), content)
	w.Close()
	forged := filepath.Join(a.t.TempDir(), "forged")
	if err := os.WriteFile(forged, z.Bytes(), 0o444); err != nil {
		a.t.Fatal(err)
	}
	a.sh(`f="$OBJECTS/${ID:0:2}/${ID:2}"
mkdir -p "$(dirname "$f")"
chmod u+w "$(dirname "$f")"
mv -f "$FORGED" "$f"`, "ID="+id, "FORGED="+forged)
	if got := a.sh(`git cat-file blob "$ID"`, "ID="+id); got != content {
		a.t.Fatalf("agent (%s): the rewritten object %s reads %q in its view; want %q", a.mode(), id, got, content)
	}
}

// plantAlternates makes the agent's object store borrow from dir.
func (a *agent) plantAlternates(dir string) {
	a.t.Helper()
	a.sh(`mkdir -p "$OBJECTS/info"; echo "$DIR" > "$OBJECTS/info/alternates"`, "DIR="+dir)
}
