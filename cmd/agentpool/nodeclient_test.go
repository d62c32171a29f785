package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// minNodeMajor is the oldest Node.js the npm test clients run on (the
// Web streams of node:stream; Debian 12 ships 18).
const minNodeMajor = 18

// nodeClient is a Node.js test program whose npm dependencies, pinned by
// its package-lock.json, are installed: node runs Script.
type nodeClient struct {
	Node   string
	Script string
}

// installNodeClient prepares the Node.js program script of testdata/dir
// (beside its package.json and package-lock.json) for a test: `npm ci`
// installs the locked dependencies once per lockfile into the user's cache
// directory (reused by later runs, so only a changed lockfile reaches the
// registry), and the script is copied into a temporary directory whose
// node_modules links there. Without node or npm, or when npm cannot
// install, the test is skipped, except under CI=true, where it fails
// (agenttest.RequireFeature): CI installs Node.js and reaches the npm
// registry.
func installNodeClient(t *testing.T, dir, script string) nodeClient {
	t.Helper()
	if testing.Short() {
		t.Skip("installs an npm client and runs it against the daemon")
	}
	node, errNode := exec.LookPath("node")
	npm, errNPM := exec.LookPath("npm")
	agenttest.RequireFeature(t, errNode == nil && errNPM == nil, "node and npm (apt-get install nodejs npm)")
	if major := nodeMajor(node); major < minNodeMajor {
		agenttest.RequireFeature(t, false, "Node.js "+strconv.Itoa(minNodeMajor)+" or later (this one is "+strconv.Itoa(major)+")")
	}

	src := filepath.Join("testdata", dir)
	manifest, err := os.ReadFile(filepath.Join(src, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.New()
	sum.Write(manifest)
	sum.Write([]byte{0})
	sum.Write(lock)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = t.TempDir() // no cache: installed for this test only
	}
	modules := filepath.Join(cache, "agentpool-test", dir+"-"+hex.EncodeToString(sum.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(modules, "node_modules", ".package-lock.json")); err != nil {
		if err := npmCI(npm, modules, manifest, lock); err != nil {
			agenttest.RequireFeature(t, false, "the npm registry for "+dir+"'s dependencies: "+err.Error())
		}
	}

	run := t.TempDir()
	if err := os.Symlink(filepath.Join(modules, "node_modules"), filepath.Join(run, "node_modules")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(src, script))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, script), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "package.json"), manifest, 0o644); err != nil { // "type": "module"
		t.Fatal(err)
	}
	return nodeClient{Node: node, Script: filepath.Join(run, script)}
}

// npmCI installs the locked dependencies into dest/node_modules: in a
// fresh sibling directory first, renamed into place when complete, so
// that an interrupted or concurrent install never leaves a partial one
// behind.
func npmCI(npm, dest string, manifest, lock []byte) error {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), filepath.Base(dest)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), manifest, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "package-lock.json"), lock, 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = tmp
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return errors.New("npm ci: " + err.Error() + ": " + strings.TrimSpace(out.String()))
	}
	if err := os.Rename(tmp, dest); err != nil {
		if _, statErr := os.Stat(filepath.Join(dest, "node_modules", ".package-lock.json")); statErr == nil {
			return nil // another run installed it meanwhile
		}
		return err
	}
	return nil
}

// nodeMajor returns the major version of the node program, 0 if unknown.
func nodeMajor(node string) int {
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return 0
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	major, _, _ := strings.Cut(v, ".")
	n, _ := strconv.Atoi(major)
	return n
}
