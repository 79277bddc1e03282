package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCompletionKnowsThePolicy: the shells' completion (memwatch
// __complete) lists the policy's stores for trigger, the recent records
// for undo with their summary, and recall's --scope values.
func TestCompletionKnowsThePolicy(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "apps", "a")
	os.MkdirAll(app, 0o755)
	os.WriteFile(filepath.Join(app, "memory.md"), bigMemory(40, "v1"), 0o644)
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n    settle: 50ms\n    keep_history: 3\n    max_size: 4KiB\n  - name: notes\n    layout: memory-history\n    paths: [%q]\n", filepath.Join(dir, "apps", "*"), filepath.Join(dir, "notes", "*")))
	stateDir := filepath.Join(dir, "state")
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("rewrote file", 10*time.Second)
	complete := func(args ...string) string {
		out, err := exec.Command(memwatchFast, append([]string{"__complete", "--policy", pol, "--state-dir", stateDir}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("__complete %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := complete("trigger", ""); !strings.Contains(out, "apps\tnow-history") || !strings.Contains(out, "notes\tmemory-history") {
		t.Errorf("trigger's stores:\n%s", out)
	}
	if out := complete("undo", ""); !strings.Contains(out, "1\t") || !strings.Contains(out, "memory.md") {
		t.Errorf("undo's records:\n%s", out)
	}
	if out := complete("recall", "--scope", ""); !strings.Contains(out, "history") || !strings.Contains(out, "all") {
		t.Errorf("recall's --scope:\n%s", out)
	}
}
