package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/memwatch/memwatch/state"
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
	var log syncBuffer // the daemon writes it while the test reads
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
	if _, err := os.Stat(systemPolicy); err == nil {
		t.Logf("%s exists: the root part is left out", systemPolicy)
		return
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(systemPolicy)) })
	cmd := exec.Command(memwatchFast, "init", "--home", alice.home, "--write")
	cmd.Env = append(os.Environ(), "MEMWATCH_POLICY=")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), filepath.Join(systemPolicy, "memwatch.yaml")) {
		t.Fatalf("init --write as root: %v\n%s", err, out)
	}
	cmd = exec.Command(memwatchFast, "validate")
	cmd.Env = append(os.Environ(), "MEMWATCH_POLICY=")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), systemPolicy) || !strings.Contains(string(out), "claude-code") {
		t.Errorf("validate as root with no flags: %v\n%s", err, out)
	}
}

// TestOperatorUndoSticks: MEMORY.md (300 lines, memory_max_lines 100,
// link_pruned) is compressed; memwatch undo brings it back byte for byte
// and takes the facts it moved out of memory-older-*.md again (no fact in
// both); the agent's next line sets off no new compression (status says
// the undo holds it); a second undo says it was already undone, and by
// which record; memwatch redo lets the rule apply again.
func TestOperatorUndoSticks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := filepath.Join(dir, "ws", "p")
	os.MkdirAll(root, 0o755)
	var mem strings.Builder
	mem.WriteString("# Memory\n\n")
	for i := range 298 {
		mem.WriteString("- fact " + strings.Repeat("x", i%7) + " number " + itoa(i) + "\n")
	}
	orig := mem.String()
	os.WriteFile(filepath.Join(root, "MEMORY.md"), []byte(orig), 0o644)
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, `stores:
  - name: mh
    layout: memory-history
    paths: [`+filepath.Join(dir, "ws", "*")+`]
    settle: 30ms
    consolidate: false
    memory_max_lines: 100
    link_pruned: true
`)
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	recs := waitJournal(t, stateDir, 30*time.Second, "the compression", func(r state.Record) bool {
		return r.Rule == "compress-memory" && r.Outcome == state.Done && r.Target == "MEMORY.md"
	})
	id := recs[0].ID
	run := func(args ...string) (string, int) {
		out, err := exec.Command(memwatchFast, append(args, "--policy", pol, "--state-dir", stateDir)...).CombinedOutput()
		return string(out), exitCode(err)
	}
	if out, code := run("undo", itoa(int(id))); code != 0 {
		t.Fatalf("undo %d: exit %d\n%s", id, code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "MEMORY.md")); string(b) != orig {
		t.Errorf("MEMORY.md after the undo is not back byte for byte (%d bytes, want %d)", len(b), len(orig))
	}
	older, _ := filepath.Glob(filepath.Join(root, "memory-older-*.md"))
	for _, f := range older {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "- fact") && strings.Contains(orig, l+"\n") {
				t.Errorf("%q is in both MEMORY.md and %s after the undo", l, filepath.Base(f))
				break
			}
		}
	}
	// The agent's next line: no new compression.
	f, _ := os.OpenFile(filepath.Join(root, "MEMORY.md"), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("- one more fact from the agent\n")
	f.Close()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := run("log", "--json", "--limit", "100")
		var all []state.Record
		json.Unmarshal([]byte(out), &all)
		for _, r := range all {
			if r.Rule == "compress-memory" && r.Outcome == state.Done && r.Target == "MEMORY.md" && r.ID > id {
				t.Fatalf("one appended line set off compression #%d after the undo", r.ID)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if out, code := run("status"); code != 0 || !strings.Contains(out, "held by an undo") || !strings.Contains(out, "memwatch redo "+itoa(int(id))) {
		t.Errorf("status does not show the hold: exit %d\n%s", code, out)
	}
	if out, code := run("undo", itoa(int(id))); code == 0 || !strings.Contains(out, "already undone by #") {
		t.Errorf("a second undo: exit %d\n%s", code, out)
	}
	if out, code := run("redo", itoa(int(id))); code != 0 {
		t.Fatalf("redo: exit %d\n%s", code, out)
	}
	waitJournal(t, stateDir, 30*time.Second, "the compression after redo", func(r state.Record) bool {
		return r.Rule == "compress-memory" && r.Outcome == state.Done && r.Target == "MEMORY.md" && r.ID > id
	})
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestOperatorCatchUpProgress: session logs written before the daemon
// starts (MEMWATCH_CATCHUP_FILES, default 400 of 100 KB; the issue's
// figure is 2,000): every status read while it catches up says the files
// and bytes done of the total, and a time left; the log says it too.
func TestOperatorCatchUpProgress(t *testing.T) {
	t.Parallel()
	n := 400
	if v, err := strconv.Atoi(os.Getenv("MEMWATCH_CATCHUP_FILES")); err == nil && v > 0 {
		n = v
	}
	dir := t.TempDir()
	var log strings.Builder
	for i := range 700 {
		log.WriteString(`{"role":"user","content":"step ` + itoa(i) + ` of the rollout: ` + strings.Repeat("deploy the service ", 6) + `"}` + "\n")
	}
	for r := range 10 {
		sess := filepath.Join(dir, "ws", "r"+itoa(r), "sessions")
		os.MkdirAll(sess, 0o755)
		for i := r; i < n; i += 10 {
			os.WriteFile(filepath.Join(sess, "s"+itoa(i)+".jsonl"), []byte(log.String()), 0o644)
		}
	}
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, `stores:
  - name: mh
    layout: memory-history
    paths: [`+filepath.Join(dir, "ws", "*")+`]
    consolidate: false
`)
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 30*time.Second)
	reads, last := 0, ""
	for {
		out, err := exec.Command(memwatchFast, "status", "--policy", pol, "--state-dir", stateDir, "--json").Output()
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		var st struct {
			CatchUp *struct {
				Files      int64 `json:"files"`
				FT         int64 `json:"files_total"`
				Bytes      int64 `json:"bytes"`
				BytesTotal int64 `json:"bytes_total"`
				Left       int64 `json:"left"`
			} `json:"catching_up"`
		}
		json.Unmarshal(out, &st)
		if st.CatchUp == nil {
			break
		}
		reads++
		c := st.CatchUp
		if c.FT == 0 || c.BytesTotal == 0 || c.Left <= 0 && c.Bytes < c.BytesTotal {
			t.Errorf("status read %d while catching up: %+v, want done of a total and a time left", reads, *c)
		}
		last = string(out)
		time.Sleep(100 * time.Millisecond)
	}
	p.waitLog("caught up: every root evaluated, its logs captured and indexed", time.Minute)
	t.Logf("%d status reads while catching up; the last: %.300s", reads, last)
	if reads == 0 {
		t.Log("the catch-up ended before the first status read")
	}
}

// TestOperatorConventions: the everyday commands follow what people know.
// Sizes read as a person reads them (--bytes for scripts); an unknown name
// is a usage error (2) and nothing found is 1, in every command; log
// takes -n, --since, --until and follows; its lines fit the terminal; a
// compaction's journal reason reads right.
func TestOperatorConventions(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "apps", "a")
	os.MkdirAll(app, 0o755)
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, "stores:\n  - name: apps\n    layout: now-history\n    paths: ["+strconv.Quote(filepath.Join(dir, "apps", "*"))+"]\n    settle: 100ms\n    cooldown: 100ms\n    max_size: 4KiB\n    keep_history: 3\n")
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	run := func(args ...string) (string, int) {
		cmd := exec.Command(memwatchFast, append(args, "--policy", pol, "--state-dir", stateDir)...)
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	mem := filepath.Join(app, "memory.md")
	compactions := func() int {
		out, _ := run("log", "--json", "--rule", "compact")
		var recs []state.Record
		json.Unmarshal([]byte(out), &recs)
		return len(recs)
	}
	os.WriteFile(mem, bigMemory(40, "first"), 0o644)
	waitUntil(t, 10*time.Second, func() bool { return compactions() == 1 })

	// Sizes.
	out, code := run("status")
	if code != 0 || !regexp.MustCompile(`journal \d+(\.\d)? (B|KiB|MiB)`).MatchString(out) || regexp.MustCompile(`\d+B\b`).MatchString(out) {
		t.Errorf("status: want sizes as 12 KiB, never 12345B (exit %d)\n%s", code, out)
	}
	if out, _ := run("status", "--bytes"); !regexp.MustCompile(`journal \d+,`).MatchString(out) {
		t.Errorf("status --bytes: want the journal's size as a count of bytes\n%s", out)
	}
	// The journal's reason reads right, and log's lines fit the terminal.
	out, code = run("log", "-n", "1", "--rule", "compact")
	if code != 0 || !regexp.MustCompile(`memory\.md is \d+(\.\d)? KiB, over max_size 4\.0 KiB`).MatchString(out) {
		t.Errorf("log -n 1 --rule compact: exit %d, want the reason 'memory.md is N KiB, over max_size 4.0 KiB'\n%s", code, out)
	}
	if n := strings.Count(out, "\n  "); strings.Count(out, "done  compact") != 1 {
		t.Errorf("log -n 1: want one record, got\n%s (%d detail lines)", out, n)
	}
	// Exit codes: 2 for what names nothing, 1 for nothing found.
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"log", "--since", "1h"}, 0, "compact"},
		{[]string{"log", "--since", "yesterday", "--until", "tomorrow", "-n", "5"}, 0, "compact"},
		{[]string{"log", "--since", "tomorrow"}, 1, "no journal record matches"},
		{[]string{"log", "--since", "last tuesday"}, 2, "--since"},
		{[]string{"log", "--store", "nope"}, 2, "no such store"},
		{[]string{"log", "-n", "0"}, 2, "-n"},
		{[]string{"trigger", "nope"}, 2, "no such store (known: apps)"},
		{[]string{"trigger", "apps", filepath.Join(dir, "apps", "zzz")}, 2, "no such file or directory"},
		{[]string{"trigger", "apps", dir}, 2, "not a root of any store"},
		{[]string{"trigger", "apps"}, 0, "queued"},
		{[]string{"show", mem + "#L99999"}, 1, "no such line"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	} {
		out, code := run(c.args...)
		if code != c.code || !strings.Contains(out, c.says) {
			t.Errorf("%v: exit %d, want %d saying %q\n%s", c.args, code, c.code, c.says, out)
		}
	}

	// log -f prints the records to come, until interrupted.
	follow := exec.Command(memwatchFast, "log", "-f", "-n", "1", "--rule", "compact", "--policy", pol, "--state-dir", stateDir)
	var got syncBuffer
	follow.Stdout, follow.Stderr = &got, &got
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, func() bool { return strings.Count(got.String(), "done  compact") == 1 })
	os.WriteFile(mem, bigMemory(40, "second"), 0o644)
	waitUntil(t, 15*time.Second, func() bool { return strings.Count(got.String(), "done  compact") == 2 })
	if n := strings.Count(got.String(), "done  compact"); n != 2 {
		t.Errorf("log -f: %d compactions printed, want the first and the new one\n%s", n, got.String())
	}
	follow.Process.Signal(os.Interrupt)
	if err := follow.Wait(); err != nil {
		t.Errorf("log -f after Ctrl-C: %v, want exit 0", err)
	}
}

// syncBuffer is a bytes.Buffer a child process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
