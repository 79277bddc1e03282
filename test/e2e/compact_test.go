package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/layout/nowhistory"
)

const sentinelKey = "sk-SENTINEL-e2e-4b1d-never-print"

func TestCompactCommandAndKeyRedaction(t *testing.T) {
	bad := "# now\n\n## State | x\n\n# History\n"
	srv := llmtest.New(t, llmtest.Step{Content: bad, Tokens: 321}, llmtest.Step{Content: bad, Tokens: 321}, llmtest.Step{Status: 500})
	dir := t.TempDir()
	app := filepath.Join(dir, "apps", "a")
	os.MkdirAll(app, 0o755)
	mem := filepath.Join(app, "memory.md")
	orig := bigMemory(40, "v1")
	os.WriteFile(mem, orig, 0o644)
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf(`llm:
  default:
    base_url: %s
    model: fake
    api_key_env: MEMWATCH_E2E_KEY
    timeout: 2s
stores:
  - name: apps
    layout: now-history
    paths: [%q]
    max_size: 100KiB
    keep_history: 3
`, srv.BaseURL(), filepath.Join(dir, "apps", "*")))
	env := append(os.Environ(), "MEMWATCH_E2E_KEY="+sentinelKey)
	run := func(args ...string) (string, int) {
		cmd := exec.Command(memwatchBin, args...)
		cmd.Env = env
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}

	out, code := run("validate", "--policy", pol)
	if code != 0 || !strings.Contains(out, "key from $MEMWATCH_E2E_KEY") {
		t.Errorf("validate: exit %d\n%s", code, out)
	}
	// Dry run with the LLM, offline: the destructive answer is rejected.
	out, code = run("compact", app, "--policy", pol, "--state-dir", stateDir, "--compactor", "llm", "--dry-run")
	if code != 0 || !strings.Contains(out, "guards: rejected: output drops") || !strings.Contains(out, "tokens: ~") || !strings.Contains(out, "321 used") {
		t.Errorf("dry run: exit %d\n%s", code, out)
	}
	if b, _ := os.ReadFile(mem); !bytes.Equal(b, orig) {
		t.Fatal("dry run changed memory.md")
	}
	// For real, the destructive answer is rejected: nothing is written, and
	// the command says so and fails.
	out, code = run("compact", app, "--policy", pol, "--state-dir", stateDir, "--compactor", "llm")
	if code != 1 || !strings.Contains(out, "nothing was written: the guards rejected the result") || strings.Contains(out, "written;") {
		t.Errorf("compact with a rejected LLM answer: exit %d, want 1\n%s", code, out)
	}
	if b, _ := os.ReadFile(mem); !bytes.Equal(b, orig) {
		t.Fatal("a rejected compaction changed memory.md")
	}
	// The LLM now fails with 500s: the heuristic takes over, and says so.
	out, code = run("compact", app, "--policy", pol, "--state-dir", stateDir, "--compactor", "llm", "--log-format", "json")
	if code != 0 || !strings.Contains(out, "heuristic compactor used") {
		t.Errorf("compact with a failing LLM: exit %d\n%s", code, out)
	}
	want, _ := nowhistory.CompactHeuristic(orig, 3)
	if b, _ := os.ReadFile(mem); !bytes.Equal(b, want) {
		t.Error("memory.md is not the heuristic compaction")
	}
	logOut, _ := run("log", "--state-dir", stateDir, "--json")
	for name, s := range map[string]string{"validate/compact output": out, "journal": logOut} {
		if strings.Contains(s, sentinelKey) || strings.Contains(s, "SENTINEL") {
			t.Errorf("the API key appears in the %s", name)
		}
	}
	for _, h := range srv.Headers() {
		if h.Get("Authorization") != "Bearer "+sentinelKey {
			t.Errorf("the key was not sent to the endpoint")
		}
	}

	// Through a running daemon: the same command is served by it.
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	os.WriteFile(mem, orig, 0o644)
	time.Sleep(700 * time.Millisecond) // under max_size: the daemon itself leaves it alone
	out, code = run("compact", app, "--policy", pol, "--state-dir", stateDir, "--compactor", "heuristic")
	if code != 0 || !strings.Contains(out, "written; pre-image archived to memory/") {
		t.Errorf("compact through the daemon: exit %d\n%s", code, out)
	}
	if b, _ := os.ReadFile(mem); !bytes.Equal(b, want) {
		t.Error("memory.md is not the heuristic compaction")
	}
	p.mu.Lock()
	raw := p.raw.String()
	p.mu.Unlock()
	if !strings.Contains(raw, `"rule":"compact"`) {
		t.Error("the daemon's log does not show the compaction it ran")
	}
	if strings.Contains(raw, sentinelKey) {
		t.Error("the API key appears in the daemon's log")
	}
	p.stop(5 * time.Second)
}
