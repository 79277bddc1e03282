package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRecallCommand: a missing --dir is an error (exit 2, as grep's); with the daemon running,
// recall answers through its index, within a second of a write, exactly
// as the scan does.
func TestRecallCommand(t *testing.T) {
	// Its own runtime directory: no other test's daemon announced there.
	cmd := exec.Command(memwatchBin, "recall", "--dir", "/nonexistent/session", "jwt")
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "no such directory") {
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
		if !strings.Contains(explain, "by the index") {
			t.Errorf("recall %v: %s", q, explain)
		}
	}
	// A word written now is found at once (the part after the index is read
	// by every search), and the index catches up.
	f, _ := os.OpenFile(filepath.Join(sess, "messages.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	fmt.Fprintln(f, `{"role":"user","content":"a fresh zebrafinch"}`)
	f.Close()
	if out, _ := recallOut(stateDir, "zebrafinch"); strings.Count(out, "messages.jsonl#L") != 1 || !strings.Contains(out, "messages.jsonl#L20005") || !strings.Contains(out, "user: a fresh zebrafinch") {
		t.Errorf("a fresh line: %s", out)
	}
	// Each search may use what the one before listed of the root, unless
	// something changed there since: written right before it, a line or
	// a new note is found by the very next search, every time.
	for i := range 10 {
		word := fmt.Sprintf("quetzal%d", i)
		f, _ := os.OpenFile(filepath.Join(sess, "messages.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
		fmt.Fprintf(f, `{"role":"user","content":"a %s"}`+"\n", word)
		f.Close()
		if out, _ := recallOut(stateDir, word); !strings.Contains(out, "user: a "+word) {
			t.Errorf("the line written right before: %s not found\n%s", word, out)
		}
		note := fmt.Sprintf("note%d.md", i)
		os.WriteFile(filepath.Join(sess, "working-memory", "detail", note), []byte("- the "+word+"ish plan\n"), 0o644)
		if out, _ := recallOut(stateDir, word+"ish"); !strings.Contains(out, note) {
			t.Errorf("the note written right before: %s not found\n%s", note, out)
		}
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

// TestRecallQuestions: a question is ranked (the message answering it
// first, with its score and why under --explain); --sort newest keeps
// every-word, newest-first (nothing found: exit 1); a bad --sort or
// --scope is a usage error (exit 2); and with a policy given from a
// directory that is none of its roots and no project's, every root of the
// policy is searched, saying so.
func TestRecallQuestions(t *testing.T) {
	dir := t.TempDir()
	for i, msgs := range [][]string{
		{"what should we use for the deploy pipeline?", "we decided on blue-green deploys with a manual gate", "ok, noted"},
		{"the gate failed again on friday", "deploy deploy deploy: the pipeline retried", "lunch at noon"},
	} {
		root := filepath.Join(dir, "ws", fmt.Sprintf("r%d", i))
		os.MkdirAll(filepath.Join(root, "sessions"), 0o755)
		var b strings.Builder
		for k, m := range msgs {
			fmt.Fprintf(&b, `{"role":%q,"content":%q}`+"\n", []string{"user", "assistant"}[k%2], m)
		}
		os.WriteFile(filepath.Join(root, "sessions", "s.jsonl"), []byte(b.String()), 0o644)
	}
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: m\n    layout: memory-history\n    paths: [%q]\n    consolidate: false\n", filepath.Join(dir, "ws", "*")))
	run := func(cwd string, args ...string) (string, string, error) {
		cmd := exec.Command(memwatchBin, append([]string{"recall"}, args...)...)
		cmd.Dir = cwd
		cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+filepath.Join(dir, "state"))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return string(out), stderr.String(), err
	}
	r0 := filepath.Join(dir, "ws", "r0")
	out, stderr, err := run(r0, "--policy", pol, "--explain", "what did we decide about the deploy?")
	if first, _, _ := strings.Cut(out, "\n\n"); err != nil || !strings.Contains(first, "sessions/s.jsonl#L2") || !strings.Contains(first, "score ") || !strings.Contains(out, "from the messages around it") || !strings.Contains(stderr, "searching the root "+r0) {
		t.Errorf("a question: %v\n%s\n%s", err, out, stderr)
	}
	out, stderr, err = run(r0, "--policy", pol, "--sort", "newest", "what did we decide about the deploy?")
	if exitCode(err) != 1 || out != "" || !strings.Contains(stderr, "nothing found") {
		t.Errorf("--sort newest: every word must appear: exit %d\n%s\n%s", exitCode(err), out, stderr)
	}
	if _, stderr, err := run(r0, "--sort", "oldest", "deploy"); exitCode(err) != 2 || !strings.Contains(stderr, "--sort must be relevance or newest") {
		t.Errorf("--sort oldest: exit %d, %s", exitCode(err), stderr)
	}
	if _, stderr, err := run(r0, "--policy", pol, "--scope", "bogus", "deploy"); exitCode(err) != 2 || !strings.Contains(stderr, `unknown scope "bogus"`) {
		t.Errorf("--scope bogus: exit %d, %s", exitCode(err), stderr)
	}
	elsewhere := t.TempDir()
	out, stderr, err = run(elsewhere, "--policy", pol, "--limit", "10", "deploy")
	if err != nil || !strings.Contains(out, "r0/sessions/s.jsonl#L2") || !strings.Contains(out, "r1/sessions/s.jsonl#L2") || !strings.Contains(stderr, "searching every root you can read") {
		t.Errorf("from outside the roots: %v\n%s\n%s", err, out, stderr)
	}
}

// TestRecallAllCitationsStandAlone: what recall --all prints names each
// result's root and store, cites files by their whole path, and memwatch
// show takes each citation as printed (a message, a history entry) with no
// --dir; a history entry written to HISTORY.md and its month's mirror is
// one result (the message it holds another), the mirror's line folded.
func TestRecallAllCitationsStandAlone(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	a := filepath.Join(ws, "a")
	for _, r := range []string{a, filepath.Join(ws, "b")} {
		os.MkdirAll(filepath.Join(r, "sessions"), 0o755)
	}
	var b strings.Builder
	for i := range 60 {
		text := fmt.Sprintf("message %d about the weather", i)
		if i == 2 {
			text = "we agreed the zebracorn deploy waits for the quokka migration"
		}
		line, _ := json.Marshal(map[string]string{"role": []string{"user", "assistant"}[i%2], "content": text, "timestamp": fmt.Sprintf("2026-11-26T10:%02d:00Z", i)})
		b.Write(line)
		b.WriteByte('\n')
	}
	os.WriteFile(filepath.Join(a, "sessions", "s1.jsonl"), []byte(b.String()), 0o644)
	os.WriteFile(filepath.Join(ws, "b", "sessions", "s1.jsonl"), []byte(`{"role":"user","content":"nothing here"}`+"\n"), 0o644)
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf("state_dir: %s\nstores:\n  - name: notes\n    layout: memory-history\n    paths: [%q]\n    settle: 50ms\n    window: 50\n    keep: 10\n    session_idle: 1h\n", stateDir, filepath.Join(ws, "*")))
	p := start(t, "--policy", pol)
	p.waitLog("ready", 10*time.Second)
	waitUntil(t, time.Minute, func() bool {
		h, _ := os.ReadFile(filepath.Join(a, "HISTORY.md"))
		m, _ := filepath.Glob(filepath.Join(a, "HISTORY-*.md"))
		return strings.Contains(string(h), "message 45 about") && len(m) == 1
	})
	recall := func(args ...string) []recallResult {
		t.Helper()
		out, err := exec.Command(memwatchBin, append([]string{"recall", "--policy", pol, "--all", "--json"}, args...)...).Output()
		var res []recallResult
		if err != nil || json.Unmarshal(out, &res) != nil {
			t.Fatalf("recall %q: %v\n%s", args, err, out)
		}
		return res
	}
	show := func(cite, want string) {
		t.Helper()
		out, err := exec.Command(memwatchBin, "show", "--policy", pol, cite).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("show %s (as printed, no --dir): %v\n%s", cite, err, out)
		}
	}
	res := recall("zebracorn")
	if len(res) != 1 || res[0].Root != a || res[0].Store != "notes" || res[0].Citation != a+"/sessions/s1.jsonl#L3" {
		t.Fatalf("recall --all zebracorn: got %+v, want the message, its root %s and store notes, cited by its whole path", res, a)
	}
	show(res[0].Citation, "zebracorn")
	res = recall(`"message 45 about"`)
	var cites []string
	for _, r := range res {
		cites = append(cites, r.Citation)
		show(r.Citation, "message 45 about")
	}
	if len(res) != 2 || !slices.ContainsFunc(cites, func(c string) bool { return strings.HasPrefix(c, a+"/HISTORY.md#L") }) {
		t.Errorf("a message consolidated into a history entry (and its mirror): got %q, want the message and one entry, in HISTORY.md", cites)
	}
	for _, r := range res {
		if strings.Contains(r.Citation, "HISTORY.md") && (len(r.Folded) != 1 || !strings.Contains(r.Folded[0], "HISTORY-")) {
			t.Errorf("the entry %s folded %q, want its mirror's line", r.Citation, r.Folded)
		}
	}
	out, _ := exec.Command(memwatchBin, "recall", "--policy", pol, "--all", "zebracorn").Output()
	if !strings.Contains(string(out), a+"/sessions/s1.jsonl#L3") || !strings.HasPrefix(string(out), "a  2026-11-26 10:02  ") {
		t.Errorf("recall --all's text names no project, date and whole citation:\n%s", out)
	}
	p.stop(5 * time.Second)
}

type recallResult struct {
	Citation, Text, Root, Store string
	Folded                      []string
}
