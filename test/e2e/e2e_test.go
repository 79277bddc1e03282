// Package e2e drives the real programs: memwatchd (every command, the
// daemon) and the client, built once by TestMain, against real files,
// real agents' writers and real clients, each test with a HOME, XDG
// directories and a policy of its own.
package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/memwatch/memwatch/layout/nowhistory"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/rewrite/writertest"
	"github.com/memwatch/memwatch/state"
)

// memwatchBin is the real binary, built once for every end-to-end test
// as it ships: without the race detector, which made the daemons of the
// suite several times slower (its default run 611-732 s instead of 476
// on 2 cores) while the packages' own tests run with it. With
// MEMWATCH_E2E_RACE=1 (make race-e2e) and tests built with -race,
// memwatchBin has the race detector too; memwatchFast never has it, for
// the crash loop, which starts memwatch hundreds of times, and the tests
// of many files.
var memwatchBin, memwatchFast string

// raceEnv asks for the binary under test with the race detector.
const raceEnv = "MEMWATCH_E2E_RACE"

// The three programs' packages, and the system's policy directory
// (cmd/internal/cli's SystemPolicy).
const (
	daemonPkg    = "github.com/memwatch/memwatch/cmd/memwatchd"
	clientPkg    = "github.com/memwatch/memwatch/cmd/memwatch"
	searchPkg    = "github.com/memwatch/memwatch/cmd/memwatch-search"
	systemPolicy = "/etc/memwatch/policy.d"
)

func TestMain(m *testing.M) {
	writertest.Main() // when re-executed as an agent's writer
	agentHelperMain() // when re-executed as the agent of the confinement suite
	seedAgent()       // when re-executed as memory-history's agent
	dir, err := os.MkdirTemp("", "memwatch-e2e")
	if err != nil {
		panic(err)
	}
	hermetic(dir)
	memwatchBin = filepath.Join(dir, "memwatch")
	memwatchFast = memwatchBin
	args := []string{"build", "-o", memwatchBin}
	if raceEnabled && os.Getenv(raceEnv) == "1" {
		args = append(args, "-race")
		memwatchFast = filepath.Join(dir, "memwatch-norace")
		if out, err := exec.Command("go", "build", "-o", memwatchFast, daemonPkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build memwatch: %v\n%s", err, out)
			os.Exit(1)
		}
	}
	out, err := exec.Command("go", append(args, daemonPkg)...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build memwatch: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// hermetic gives the tests an environment of their own under dir, so
// that nothing of the developer's (a policy in ~/.config/memwatch, their
// agents' ~/.claude, a daemon of theirs announced in their runtime
// directory, a MEMWATCH_POLICY) is read or changed, as root or not. The
// Go toolchain keeps its caches (tests build binaries).
func hermetic(dir string) {
	if os.Getenv(testCacheEnv) == "" {
		// What tests build once and keep (versitygw), in the developer's
		// cache, not the tests' own home.
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		os.Setenv(testCacheEnv, filepath.Join(cache, "memwatch-test"))
	}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		if os.Getenv(k) == "" {
			if out, err := exec.Command("go", "env", k).Output(); err == nil {
				os.Setenv(k, strings.TrimSpace(string(out)))
			}
		}
	}
	home := filepath.Join(dir, "home")
	os.MkdirAll(home, 0o755)
	for k, v := range map[string]string{
		"HOME":            home,
		"XDG_CONFIG_HOME": filepath.Join(home, ".config"),
		"XDG_STATE_HOME":  filepath.Join(home, ".local", "state"),
		"XDG_DATA_HOME":   filepath.Join(home, ".local", "share"),
		"XDG_CACHE_HOME":  filepath.Join(home, ".cache"),
		// Daemons announce themselves in $XDG_RUNTIME_DIR/memwatch: the
		// tests' daemons in the tests' own directory.
		"XDG_RUNTIME_DIR": filepath.Join(dir, "run"),
		// A command a test runs without --state-dir keeps its state here,
		// not in the machine's default (/var/lib/memwatch as root).
		"STATE_DIRECTORY": filepath.Join(dir, "default-state"),
	} {
		os.Setenv(k, v)
	}
	// Made, so that a daemon run as root takes it (else it would use the
	// machine's /run/memwatch).
	os.MkdirAll(filepath.Join(dir, "run"), 0o700)
	for _, k := range []string{"MEMWATCH_POLICY", "MEMWATCH_STATE_DIR", "RUNTIME_DIRECTORY", "MEMWATCH_PAGER", "PAGER"} {
		os.Unsetenv(k)
	}
}

// testCacheEnv names the directory where tests keep what they build once.
const testCacheEnv = "MEMWATCH_TEST_CACHE"

// proc is a running memwatch whose JSON log lines are collected.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []map[string]any
	raw   bytes.Buffer
	done  chan error
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startBin(t, memwatchBin, args...)
}

func startBin(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	return startEnv(t, bin, nil, args...)
}

// startEnv starts memwatch run with env as its environment (nil: the
// test's).
func startEnv(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(bin, append([]string{"run", "--log-format", "json", "--log-level", "debug"}, args...)...), done: make(chan error, 1)}
	p.cmd.Env = env
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			p.mu.Lock()
			p.raw.WriteString(sc.Text() + "\n")
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.lines = append(p.lines, m)
			}
			p.mu.Unlock()
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("memwatch log:\n%s", lastLines(p.raw.String(), 40))
			// The whole log, for a failure that needs more than its end.
			if dir := os.Getenv("MEMWATCH_TEST_LOG_DIR"); dir != "" {
				f, err := os.CreateTemp(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-*.log")
				if err == nil {
					f.Write(p.raw.Bytes())
					f.Close()
					t.Logf("the whole memwatch log is in %s", f.Name())
				}
			}
			p.mu.Unlock()
		}
	})
	return p
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// waitLog waits for a log line with that message.
func (p *proc) waitLog(msg string, timeout time.Duration) map[string]any {
	p.t.Helper()
	return p.waitLogWith(msg, nil, timeout)
}

// waitLogWith waits for a log line msg whose fields hold the values of with.
func (p *proc) waitLogWith(msg string, with map[string]any, timeout time.Duration) map[string]any {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		p.mu.Lock()
	lines:
		for _, l := range p.lines {
			if l["msg"] != msg {
				continue
			}
			for k, v := range with {
				if l[k] != v {
					continue lines
				}
			}
			p.mu.Unlock()
			return l
		}
		p.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	p.t.Fatalf("no %q log line with %v within %v", msg, with, timeout)
	return nil
}

func (p *proc) stop(timeout time.Duration) error {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		return err
	case <-time.After(timeout):
		p.t.Fatalf("memwatch did not stop within %v of SIGTERM", timeout)
		return nil
	}
}

func writePolicy(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(p, []byte("version: 1\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// bigMemory is an oversize now-history memory.md with n History entries.
func bigMemory(n int, tag string) []byte {
	var b strings.Builder
	b.WriteString("# now\n\n## State | " + tag + "\n- runs: 1\n\n## Patterns\n- p\n\n# History\n\n")
	for i := range n {
		fmt.Fprintf(&b, "## 2026-01-%02d-%04d | run %d %s\n- %s\n\n", i%28+1, i, i, tag, strings.Repeat("detail ", 40))
	}
	return []byte(b.String())
}

func TestRunReadyAndStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "apps", "a", "memory"), 0o755)
	os.MkdirAll(filepath.Join(dir, "apps", "b"), 0o755)
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n", filepath.Join(dir, "apps", "*")))
	p := start(t, "--policy", pol, "--state-dir", filepath.Join(dir, "state"))
	ready := p.waitLog("ready", 10*time.Second)
	if ready["stores"] != 1.0 || ready["roots"] != 2.0 || ready["watches"].(float64) < 3 {
		t.Errorf("ready line = %v; want 1 store, 2 roots, >= 3 watches", ready)
	}
	time.Sleep(200 * time.Millisecond) // idle
	t0 := time.Now()
	if err := p.stop(2 * time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want 0", err)
	}
	t.Logf("stopped %v after SIGTERM", time.Since(t0))
	if _, err := os.Stat(filepath.Join(dir, "state", "memwatch.sock")); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
}

func TestRunIdleWithOnlyCommentedPolicy(t *testing.T) {
	dir := t.TempDir()
	pd := filepath.Join(dir, "policy.d")
	os.MkdirAll(pd, 0o755)
	os.WriteFile(filepath.Join(pd, "example.yaml"), []byte("# version: 1\n# stores:\n#   - name: apps\n"), 0o644)
	p := start(t, "--policy", pd, "--state-dir", filepath.Join(dir, "state"))
	p.waitLog("ready", 10*time.Second)
	p.waitLog("no stores configured; idle until the policy names one (edit it and send SIGHUP or systemctl reload memwatch)", time.Second)
	if err := p.stop(2 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestValidateExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n", filepath.Join(dir, "*")))
	out, err := exec.Command(memwatchBin, "validate", "--policy", good).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "store apps: layout now-history") {
		t.Errorf("validate good policy: %v\n%s", err, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("version: 1\nstores:\n  - name: apps\n    layout: now-history\n    paths: [\"/x/*\"]\n    max_sise: 1KiB\n"), 0o644)
	cmd := exec.Command(memwatchBin, "validate", "--policy", bad)
	out, _ = cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 2 {
		t.Errorf("exit code = %d, want 2", code)
	}
	if want := bad + `:6:5: unknown key "max_sise" in store "apps"; did you mean "max_size"?`; !strings.Contains(string(out), want) {
		t.Errorf("output %q does not contain %q", out, want)
	}
	cmd = exec.Command(memwatchBin, "run", "--policy", bad)
	cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 2 {
		t.Errorf("run with a bad policy: exit code = %d, want 2", code)
	}
}

func TestCompactsReloadsAndUndoes(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "apps", "a")
	os.MkdirAll(app, 0o755)
	stateDir := filepath.Join(dir, "state")
	body := fmt.Sprintf("stores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n    settle: 200ms\n    cooldown: 300ms\n    max_size: 4KiB\n    keep_history: 3\n", filepath.Join(dir, "apps", "*"))
	pol := writePolicy(t, dir, body)
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)

	// An oversize memory.md is archived byte-identical and compacted within settle + 1 s.
	pre := bigMemory(40, "first")
	mem := filepath.Join(app, "memory.md")
	os.WriteFile(mem, pre, 0o644)
	t0 := time.Now()
	post, _ := nowhistory.CompactHeuristic(pre, 3)
	for {
		if b, _ := os.ReadFile(mem); bytes.Equal(b, post) {
			break
		}
		if time.Since(t0) > 200*time.Millisecond+time.Second {
			t.Fatalf("memory.md not compacted within settle + 1s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("compacted %v after the write", time.Since(t0))
	archives, _ := filepath.Glob(filepath.Join(app, "memory", "*.md"))
	if len(archives) != 1 {
		t.Fatalf("archives = %v, want 1", archives)
	}
	if a, _ := os.ReadFile(archives[0]); !bytes.Equal(a, pre) {
		t.Errorf("archive is not byte-identical to the pre-image")
	}

	// A broken policy on SIGHUP keeps the old one running.
	os.WriteFile(pol, []byte("version: 1\nstores:\n  - name: apps\n    layout: now-history\n    paths: [1, 2\n"), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog("policy reload rejected; keeping the running policy", 5*time.Second)
	os.WriteFile(mem, bigMemory(40, "second"), 0o644)
	post2, _ := nowhistory.CompactHeuristic(bigMemory(40, "second"), 3)
	waitFile(t, mem, post2, 3*time.Second)

	// A valid reload adds a store: its roots are watched without a restart.
	os.MkdirAll(filepath.Join(dir, "more", "b"), 0o755)
	os.WriteFile(pol, []byte("version: 1\n"+body+fmt.Sprintf("  - name: more\n    layout: now-history\n    paths: [%q]\n    settle: 200ms\n    max_size: 4KiB\n    keep_history: 3\n", filepath.Join(dir, "more", "*"))), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog("policy reloaded", 5*time.Second)
	memB := filepath.Join(dir, "more", "b", "memory.md")
	os.WriteFile(memB, bigMemory(40, "third"), 0o644)
	post3, _ := nowhistory.CompactHeuristic(bigMemory(40, "third"), 3)
	waitFile(t, memB, post3, 3*time.Second)

	// Undo through the running daemon: find the first compaction.
	out, err := exec.Command(memwatchBin, "log", "--policy", pol, "--state-dir", stateDir, "--rule", "compact", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var recs []state.Record
	json.Unmarshal(out, &recs)
	var first state.Record
	for _, r := range recs {
		if r.Target == "memory.md" && r.Root == app && r.BeforeSHA == rewrite.Hash(pre) {
			first = r
		}
	}
	if first.ID == 0 {
		t.Fatalf("no journal record for the first compaction in %s", out)
	}
	// The agent has changed memory.md since (second compaction): refused.
	cmd := exec.Command(memwatchBin, "undo", fmt.Sprint(first.ID), "--policy", pol, "--state-dir", stateDir)
	out, _ = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(out), "target changed since this action") {
		t.Errorf("undo after an agent edit: exit %d, %s", cmd.ProcessState.ExitCode(), out)
	}
	last := recs[0]
	for _, r := range recs {
		if r.Root == app && r.AfterSHA == rewrite.Hash(post2) {
			last = r
		}
	}
	out, err = exec.Command(memwatchBin, "undo", fmt.Sprint(last.ID), "--policy", pol, "--state-dir", stateDir).CombinedOutput()
	if err != nil {
		t.Fatalf("undo: %v: %s", err, out)
	}
	if b, _ := os.ReadFile(mem); !bytes.Equal(b, bigMemory(40, "second")) {
		t.Errorf("undo did not restore the pre-image")
	}
	// The undo sticks: memwatch does not compact the restored file again
	// (it is oversize) until the agent changes it.
	time.Sleep(time.Second)
	if b, _ := os.ReadFile(mem); !bytes.Equal(b, bigMemory(40, "second")) {
		t.Errorf("memwatch redid the undone compaction")
	}
	if err := p.stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func waitFile(t *testing.T, path string, want []byte, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if b, _ := os.ReadFile(path); bytes.Equal(b, want) {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(path)
			t.Fatalf("%s did not reach the expected content within %v (has %d bytes, want %d)", path, timeout, len(b), len(want))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClientsFindTheDaemon: a daemon started with its own --state-dir and
// policy is found by log, status and undo given neither.
func TestClientsFindTheDaemon(t *testing.T) {
	if _, err := os.Stat(systemPolicy); err == nil {
		// The rule (cmd/internal/cli/target.go): with no --policy, a client of a machine
		// that has the system's policy talks to the system's service.
		t.Skip("this machine has a policy in " + systemPolicy + ": a client with no --policy talks to its service, as documented; this test is of a machine without one")
	}
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	os.Mkdir(filepath.Join(dir, "run"), 0o700)   // as root, a missing one means /run/memwatch
	t.Setenv("HOME", filepath.Join(dir, "home")) // the default state directory is unused
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("MEMWATCH_STATE_DIR", "")
	t.Setenv("MEMWATCH_POLICY", "")
	t.Setenv("STATE_DIRECTORY", "")
	app := filepath.Join(dir, "apps", "a")
	os.MkdirAll(app, 0o755)
	os.WriteFile(filepath.Join(app, "memory.md"), bigMemory(40, "v1"), 0o644)
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n    settle: 50ms\n    keep_history: 3\n    max_size: 4KiB\n", filepath.Join(dir, "apps", "*")))
	p := start(t, "--policy", pol, "--state-dir", filepath.Join(dir, "custom-state"))
	p.waitLog("ready", 10*time.Second)
	p.waitLog("rewrote file", 10*time.Second)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(memwatchFast, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("memwatch %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run("log"); !strings.Contains(out, "compact") {
		t.Errorf("log without --state-dir: %s", out)
	}
	if out := run("status"); !strings.Contains(out, filepath.Join(dir, "custom-state")) {
		t.Errorf("status without --policy: %s", out)
	}
	if out := run("undo", "1", "--dry-run"); !strings.Contains(out, "would restore memory.md") {
		t.Errorf("undo without --state-dir: %s", out)
	}
	p.stop(10 * time.Second)
	// Stopped, it is no longer announced: the message says where it looked.
	// (In a state directory of the test's: as root the default is the
	// machine's /var/lib/memwatch, which a test never touches.)
	empty := filepath.Join(dir, "no-state")
	cmd := exec.Command(memwatchFast, "undo", "1")
	cmd.Env = append(os.Environ(), "STATE_DIRECTORY="+empty)
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "no journal in "+empty) {
		t.Errorf("undo with no daemon: %s", out)
	}
}

// TestPruneCommand: memwatch prune applies a store's archive retention now,
// journaled, never touching the newest archive of a file.
func TestPruneCommand(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "apps", "a")
	os.MkdirAll(app, 0o755)
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n    keep_history: 3\n    max_size: 4KiB\n    archive_keep: 1\n", filepath.Join(dir, "apps", "*")))
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(memwatchFast, append(args, "--policy", pol, "--state-dir", stateDir)...).CombinedOutput()
		if err != nil {
			t.Fatalf("memwatch %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	for i := range 3 {
		os.WriteFile(filepath.Join(app, "memory.md"), bigMemory(40, fmt.Sprintf("v%d", i)), 0o644)
		run("compact", app)
		time.Sleep(1100 * time.Millisecond) // archives are named to the minute, numbered on collision
	}
	archives, _ := filepath.Glob(filepath.Join(app, "memory", "*.md"))
	if len(archives) != 3 {
		t.Fatalf("archives before prune: %v", archives)
	}
	if out := run("prune", "--dry-run"); !strings.Contains(out, "remove") || !strings.Contains(out, "would free") {
		t.Errorf("prune --dry-run: %s", out)
	}
	if after, _ := filepath.Glob(filepath.Join(app, "memory", "*.md")); len(after) != 3 {
		t.Errorf("a dry run removed archives: %v", after)
	}
	if out := run("prune"); !strings.Contains(out, "freed") {
		t.Errorf("prune: %s", out)
	}
	after, _ := filepath.Glob(filepath.Join(app, "memory", "*.md"))
	if len(after) != 2 {
		t.Errorf("archives after prune (archive_keep 1: the newest and one more): %v", after)
	}
	if out := run("log", "--rule", "archive-prune"); !strings.Contains(out, "archive-prune") || !strings.Contains(out, "archive_keep 1") {
		t.Errorf("the removal is not journaled: %s", out)
	}
	// diff and show read a compressed archive as text.
	old, _ := os.ReadFile(after[0])
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(old)
	zw.Close()
	packed := after[0] + ".gz"
	os.WriteFile(packed, gz.Bytes(), 0o644)
	if out := run("diff", packed, filepath.Join(app, "memory.md")); !strings.Contains(out, "--- "+packed) || !strings.Contains(out, "+++ ") || !strings.Contains(out, "\n-") {
		t.Errorf("diff of a compressed archive and the file: %s", out)
	}
	if out := run("diff", packed, after[0]); !strings.Contains(out, "hold the same text") {
		t.Errorf("diff of an archive and its compressed copy: %s", out)
	}
	if out := run("show", packed); out != string(old) {
		t.Errorf("show of a compressed archive: got %d bytes, want the archive's %d", len(out), len(old))
	}
}

// TestMetricsListener: metrics.listen serves /metrics with no token, and
// nothing else; the series name the build, job durations and the disk held.
func TestMetricsListener(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "apps", "a")
	os.MkdirAll(app, 0o755)
	os.WriteFile(filepath.Join(app, "memory.md"), bigMemory(40, "v1"), 0o644)
	pol := writePolicy(t, dir, fmt.Sprintf("metrics:\n  listen: 127.0.0.1:0\nstores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n    settle: 50ms\n    keep_history: 3\n    max_size: 4KiB\n", filepath.Join(dir, "apps", "*")))
	p := start(t, "--policy", pol, "--state-dir", filepath.Join(dir, "state"))
	addr := p.waitLog("serving metrics", 10*time.Second)["listen"].(string)
	p.waitLog("rewrote file", 10*time.Second)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wants := []string{`memwatch_build_info{goversion="go`, `memwatch_job_duration_seconds_bucket{rule="compact",store="apps"`, `memwatch_jobs_total{outcome="changed",rule="compact",store="apps"}`}
	// The job is counted when it ends, a moment after its rewrite is logged.
	var body string
	waitUntil(t, 10*time.Second, func() bool {
		var code int
		if code, body = get("/metrics"); code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		for _, want := range wants {
			if !strings.Contains(body, want) {
				return false
			}
		}
		return true
	})
	for _, want := range wants {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code, _ := get("/v1/status"); code != 404 {
		t.Errorf("/v1/status on the metrics listener: %d, want 404", code)
	}
	p.stop(10 * time.Second)
}

// TestEveryRecordSaysWhy: the records of every layout's rules carry the
// trigger and the condition that made them (memory.md over max_size, the
// messages pending, INDEX.md out of date, ...), in memwatch log --json.
func TestEveryRecordSaysWhy(t *testing.T) {
	dir := t.TempDir()
	mk := func(rel, content string) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}
	mk("now/a/memory.md", string(bigMemory(60, "a")))
	mk("facts/a/facts/user.md", "# user\n\n- prefers tabs\n- deploys on Fridays\n")
	mk("facts/a/episodes/2026-01.md", "# 2026-01\n\n## 2026-01-03\n- shipped the release\n")
	var log strings.Builder
	for i := range 12 {
		fmt.Fprintf(&log, `{"role":%q,"content":"message %d about the deploy"}`+"\n", []string{"user", "assistant"}[i%2], i)
	}
	mk("hist/a/sessions/s.jsonl", log.String())
	mk("detail/a/messages.jsonl", log.String())
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf(`stores:
  - name: now
    layout: now-history
    paths: [%q]
    settle: 50ms
    max_size: 2KiB
  - name: facts
    layout: facts-episodes
    paths: [%q]
    settle: 50ms
  - name: hist
    layout: memory-history
    paths: [%q]
    settle: 50ms
    session_idle: 1s
  - name: detail
    layout: session-detail
    paths: [%q]
    settle: 50ms
    summary_every: 10
    session_idle: 1s
`, filepath.Join(dir, "now", "*"), filepath.Join(dir, "facts", "*"), filepath.Join(dir, "hist", "*"), filepath.Join(dir, "detail", "*")))
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	want := map[string]bool{"compact": false, "summary-line": false, "index": false, "consolidate": false, "summarize": false}
	var recs []state.Record
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := exec.Command(memwatchFast, "log", "--state-dir", stateDir, "--json", "--limit", "1000").Output()
		recs = nil
		json.Unmarshal(out, &recs)
		for _, r := range recs {
			if _, ok := want[r.Rule]; ok && r.Outcome == state.Done {
				want[r.Rule] = true
			}
		}
		all := true
		for _, ok := range want {
			all = all && ok
		}
		if all {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for rule, ok := range want {
		if !ok {
			t.Errorf("no done record of %s", rule)
		}
	}
	for _, r := range recs {
		if r.Reason == "" || r.Trigger == "" {
			t.Errorf("record %d (%s %s %s) has no why: reason %q, trigger %q", r.ID, r.Rule, r.Target, r.Outcome, r.Reason, r.Trigger)
		}
		if r.Rule == "compact" && r.Outcome == state.Done && !strings.Contains(r.Reason, "memory.md is 18 KiB, over max_size 2.0 KiB") {
			t.Errorf("compaction record %d: reason %q, want the size over max_size", r.ID, r.Reason)
		}
	}
}
