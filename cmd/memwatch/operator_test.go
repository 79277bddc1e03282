//go:build !lean

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOperatorOnePolicyRule: an ordinary user (a real one, useradd) runs
// memwatch init --write, then every command with no --policy: validate
// exits 0, run starts, status names the policy file and exits 0. A typo
// saved into the file: validate exits non-zero naming the key, status and
// log still exit 0 (the daemon runs the last good policy). As root,
// validate with no flags reads what init --write wrote as root.
func TestOperatorOnePolicyRule(t *testing.T) {
	base, alice, _ := tenants(t)
	os.Chmod(alice.home, 0o755)
	proj := filepath.Join(alice.home, "src", "billing")
	os.MkdirAll(proj, 0o755)
	root := filepath.Join(alice.home, ".claude", "projects", strings.ReplaceAll(proj, "/", "-"))
	os.MkdirAll(root, 0o755)
	os.WriteFile(filepath.Join(root, "s1.jsonl"), []byte(`{"type":"user","message":{"role":"user","content":"hello"},"cwd":"`+proj+`"}`+"\n"), 0o644)
	filepath.WalkDir(alice.home, func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			os.Lchown(p, alice.uid, alice.gid)
		}
		return nil
	})
	bin := filepath.Join(base, "memwatch")
	copyFile(t, memwatchFast, bin, 0o755)
	runtime := filepath.Join(base, "run-alice")
	os.Mkdir(runtime, 0o700)
	os.Chown(runtime, alice.uid, alice.gid)
	as := func(args ...string) (string, int) {
		cmd := alice.command(bin, args...)
		cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+runtime)
		cmd.Dir = alice.home
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	pol := filepath.Join(alice.home, ".config", "memwatch", "policy.yaml")
	if out, code := as("init", "--write"); code != 0 || !strings.Contains(out, "wrote "+pol) {
		t.Fatalf("init --write: exit %d\n%s", code, out)
	}
	if out, code := as("validate"); code != 0 || !strings.Contains(out, pol) {
		t.Fatalf("validate with no --policy: exit %d\n%s", code, out)
	}
	daemon := alice.command(bin, "run", "--log-format", "json")
	daemon.Env = append(daemon.Env, "XDG_RUNTIME_DIR="+runtime)
	daemon.Dir = alice.home
	var log strings.Builder
	daemon.Stderr = &log
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { daemon.Process.Signal(syscall.SIGTERM); daemon.Wait() })
	waitUntil(t, 20*time.Second, func() bool { return strings.Contains(log.String(), `"msg":"ready"`) })
	if !strings.Contains(log.String(), `"msg":"ready"`) {
		t.Fatalf("run with no --policy did not start:\n%s", log.String())
	}
	if out, code := as("status"); code != 0 || !strings.Contains(out, "policy "+pol) {
		t.Errorf("status: exit %d\n%s", code, out)
	}
	// A typo, saved.
	good, _ := os.ReadFile(pol)
	bad := strings.Replace(string(good), "preset: claude-code", "preset: claude-code\n    layuot: memory-history", 1)
	os.WriteFile(pol, []byte(bad), 0o644)
	if out, code := as("validate"); code == 0 || !strings.Contains(out, "layuot") {
		t.Errorf("validate of the typo: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{{"status"}, {"log"}} {
		if out, code := as(args...); code != 0 || !strings.Contains(out, "layuot") || !strings.Contains(out, "daemon") {
			t.Errorf("%v with the typo saved: exit %d\n%s", args, code, out)
		}
	}
	if out, code := as("status"); code != 0 || !strings.Contains(out, "policy "+pol) {
		t.Errorf("status with the typo: exit %d\n%s", code, out)
	}

	// As root: init --write writes the system's policy, which validate
	// with no flags reads. Only where the machine has none of its own.
	if _, err := os.Stat(SystemPolicy); err == nil {
		t.Logf("%s exists: the root part is left out", SystemPolicy)
		return
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(SystemPolicy)) })
	cmd := exec.Command(memwatchFast, "init", "--home", alice.home, "--write")
	cmd.Env = append(os.Environ(), "MEMWATCH_POLICY=")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), filepath.Join(SystemPolicy, "memwatch.yaml")) {
		t.Fatalf("init --write as root: %v\n%s", err, out)
	}
	cmd = exec.Command(memwatchFast, "validate")
	cmd.Env = append(os.Environ(), "MEMWATCH_POLICY=")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), SystemPolicy) || !strings.Contains(string(out), "claude-code") {
		t.Errorf("validate as root with no flags: %v\n%s", err, out)
	}
}
