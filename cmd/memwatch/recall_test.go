package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRecallCommand: a missing --dir is an error; with the daemon running,
// recall answers through its index, within a second of a write, exactly
// as the scan does.
func TestRecallCommand(t *testing.T) {
	out, err := exec.Command(memwatchBin, "recall", "--dir", "/nonexistent/session", "jwt").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "no such file or directory") {
		t.Errorf("missing --dir: exit %d, %s", code, out)
	}
	dir := t.TempDir()
	sess := filepath.Join(dir, "sessions", "a")
	os.MkdirAll(filepath.Join(sess, "working-memory", "detail"), 0o755)
	var log strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&log, `{"role":"user","content":"deploy step %d of the rollout"}`+"\n", i)
		if i%5000 == 4999 {
			log.WriteString(`{"role":"assistant","content":[{"type":"tool_use","name":"Bash","input":{"command":"kubectl rollout undo deploy/web"}}]}` + "\n")
		}
	}
	os.WriteFile(filepath.Join(sess, "messages.jsonl"), []byte(log.String()), 0o644)
	os.WriteFile(filepath.Join(sess, "working-memory", "detail", "notes.md"), []byte("# Notes\n- rollout plan: deploy web first\n"), 0o644)
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: s\n    layout: session-detail\n    paths: [%q]\n    settle: 50ms\n    summary_every: 1000000\n", filepath.Join(dir, "sessions", "*")))
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	recallOut := func(env string, args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(memwatchFast, append([]string{"recall", "--dir", sess, "--explain"}, args...)...)
		cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+env)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("recall %v: %v\n%s", args, err, stderr.String())
		}
		return string(b), stderr.String()
	}
	// The daemon indexes the log shortly after it sees it.
	t0 := time.Now()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, explain := recallOut(stateDir, "kubectl")
		if strings.Contains(explain, "the index for 2 of 2 files") || strings.Contains(explain, "the index for 1 of 2 files") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the index was not used: %s", explain)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("indexed %v after ready", time.Since(t0))
	empty := t.TempDir()
	for _, q := range [][]string{{"kubectl"}, {"--limit", "10", "deploy"}, {"rollout", "undo"}, {`"deploy web"`}} {
		fast, explain := recallOut(stateDir, q...)
		scan, _ := recallOut(empty, q...)
		if fast != scan {
			t.Errorf("recall %v: the index and the scan differ\nindex: %s\nscan:  %s", q, fast, scan)
		}
		if !strings.Contains(explain, "answered by the index") {
			t.Errorf("recall %v: %s", q, explain)
		}
	}
	// A word written now is found at once (the part after the index is read
	// by every search), and the index catches up.
	f, _ := os.OpenFile(filepath.Join(sess, "messages.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	fmt.Fprintln(f, `{"role":"user","content":"a fresh zebrafinch"}`)
	f.Close()
	if out, _ := recallOut(stateDir, "zebrafinch"); !strings.Contains(out, "Found 1 result(s)") || !strings.Contains(out, "messages.jsonl#L20005") {
		t.Errorf("a fresh line: %s", out)
	}
	// A capture still running under -race may take its shutdown grace.
	p.stop(30 * time.Second)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
