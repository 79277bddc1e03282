//go:build !lean

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLeanBinary: memwatch built with -tags lean runs recall, show and
// version itself, links none of the daemon's heavy packages, and runs
// every other command through memwatchd beside it (arguments, exit code
// and output as memwatchd's); without a memwatchd it says what is missing.
func TestLeanBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "lean", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, heavy := range []string{"github.com/benbjohnson/litestream", "github.com/prometheus/client_golang/prometheus", "github.com/aws/aws-sdk-go-v2/service/s3", "github.com/modelcontextprotocol/go-sdk/mcp", "github.com/kardianos/service", "github.com/memwatch/memwatch/daemon", "google.golang.org/protobuf/proto"} {
		for _, dep := range strings.Fields(string(out)) {
			if dep == heavy {
				t.Errorf("the lean binary links %s", heavy)
			}
		}
	}
	dir := t.TempDir()
	lean := filepath.Join(dir, "bin", "memwatch")
	if out, err := exec.Command("go", "build", "-tags", "lean", "-o", lean, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the lean memwatch: %v\n%s", err, out)
	}
	if err := os.Symlink(memwatchFast, filepath.Join(dir, "bin", "memwatchd")); err != nil {
		t.Fatal(err)
	}
	run := func(bin string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin")
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	if out, code := run(lean, "version"); code != 0 || !strings.HasPrefix(out, "memwatch ") {
		t.Errorf("lean version: exit %d, %s", code, out)
	}
	root := filepath.Join(dir, "root")
	os.MkdirAll(root, 0o755)
	os.WriteFile(filepath.Join(root, "messages.jsonl"), []byte(`{"role":"user","content":"the zebracorn deploy waits"}`+"\n"), 0o644)
	if out, code := run(lean, "recall", "--state-dir", filepath.Join(dir, "state"), "--dir", root, "zebracorn"); code != 0 || !strings.Contains(out, "messages.jsonl#L1") {
		t.Errorf("lean recall: exit %d, %s", code, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("version: 1\nstores: [\n"), 0o644)
	for _, args := range [][]string{{"validate", "--policy", bad}, {"--policy", bad, "validate"}} {
		out, code := run(lean, args...)
		if want, _ := run(memwatchFast, args...); code != 2 || out != want {
			t.Errorf("lean %q, through memwatchd: exit %d, %q; want exit 2, %q", args, code, out, want)
		}
	}
	alone := filepath.Join(dir, "alone", "memwatch")
	os.MkdirAll(filepath.Dir(alone), 0o755)
	b, _ := os.ReadFile(lean)
	os.WriteFile(alone, b, 0o755)
	if out, code := run(alone, "validate", "--policy", bad); code != 1 || !strings.Contains(out, "memwatchd") {
		t.Errorf("lean alone, validate: exit %d, %s; want exit 1 naming memwatchd", code, out)
	}
}
