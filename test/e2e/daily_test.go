package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOneTerminalBehaviour: the everyday commands read as the tools people
// know: recall's paths from the current directory (as rg's), which show
// takes back; diff, versions and status coloured as git's with --color;
// an unknown --root a usage error (exit 2) as an unknown --store is; and
// --help listing the everyday commands first, the seeds' tools apart.
func TestOneTerminalBehaviour(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	projects := filepath.Join(dir, "home", ".claude", "projects")
	project := filepath.Join(projects, "-work-billing")
	os.MkdirAll(filepath.Join(project, "memory"), 0o755)
	var b strings.Builder
	for i := range 12 {
		line, _ := json.Marshal(map[string]any{"type": "user", "sessionId": "s1", "cwd": "/work/billing", "timestamp": "2026-11-27T10:00:00Z",
			"message": map[string]any{"role": "user", "content": fmt.Sprintf("turn %d about the quillwort limiter", i)}})
		b.Write(append(line, '\n'))
	}
	os.WriteFile(filepath.Join(project, "s1.jsonl"), []byte(b.String()), 0o644)
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: cc\n    preset: claude-code\n    paths: [%q]\n", filepath.Join(projects, "*")))
	state := filepath.Join(dir, "state")
	run := func(cwd string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(memwatchFast, append(args, "--policy", pol, "--state-dir", state)...)
		cmd.Dir = cwd
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}

	// From the projects folder: the hit's path from there, "./" before
	// Claude Code's folder name (it starts with "-"); show takes it.
	out, code := run(projects, "recall", "-n", "1", "quillwort")
	want := "./-work-billing/s1.jsonl#L12"
	if code != 0 || !strings.Contains(out, want) || strings.Contains(out, project+"/s1.jsonl") {
		t.Fatalf("recall from %s: exit %d\n%s\nwant the citation %s, relative as rg's paths", projects, code, out, want)
	}
	if out, code := run(projects, "show", want); code != 0 || !strings.Contains(out, "turn 11 about the quillwort limiter") {
		t.Errorf("show %s from %s: exit %d\n%s", want, projects, code, out)
	}
	// Neighbouring hits are one passage, each hit marked, as rg merges
	// overlapping context.
	out, _ = run(projects, "recall", "-n", "3", "-C", "1", "quillwort")
	if n := strings.Count(out, "s1.jsonl#L"); n != 1 || !strings.Contains(out, "#L9-12") || !strings.Contains(out, "L11: user: turn 10") || !strings.Contains(out, "L9- user: turn 8") {
		t.Errorf("recall -n 3 -C 1 of three neighbouring turns:\n%s\nwant one passage, L9-12, its hits marked L10: L11: L12:", out)
	}
	// From elsewhere the whole path.
	if out, _ := run(dir+"/..", "recall", "--all", "-n", "1", "quillwort"); !strings.Contains(out, filepath.Join(project, "s1.jsonl")+"#L12") && !strings.Contains(out, filepath.Base(dir)) {
		t.Errorf("recall from outside: %s", out)
	}

	// diff coloured as git's.
	a, c := filepath.Join(dir, "a.md"), filepath.Join(dir, "b.md")
	os.WriteFile(a, []byte("same\nold line\n"), 0o644)
	os.WriteFile(c, []byte("same\nnew line\n"), 0o644)
	out, _ = run(dir, "diff", "--color", "always", a, c)
	for _, w := range []string{"\x1b[31m" + "-old line" + "\x1b[0m", "\x1b[32m" + "+new line" + "\x1b[0m", "\x1b[36m" + "@@"} {
		if !strings.Contains(out, w) {
			t.Errorf("diff --color always:\n%q\nwant %q", out, w)
		}
	}
	if out, _ = run(dir, "diff", a, c); strings.Contains(out, "\x1b[") {
		t.Errorf("diff to a pipe holds colour: %q", out)
	}

	// An unknown --root is the request's mistake, as an unknown --store,
	// with the daemon answering and without.
	p := start(t, "--policy", pol, "--state-dir", state)
	p.waitLog("ready", 10*time.Second)
	if out, code := run(dir, "log", "--root", "/nonexistent/root"); code != 2 || !strings.Contains(out, "not a root") {
		t.Errorf("log --root /nonexistent/root: exit %d\n%s\nwant 2 and why", code, out)
	}
	if _, code := run(dir, "log", "--root", project); code == 2 {
		t.Errorf("log --root of a real root: exit 2")
	}
	p.stop(10 * time.Second)
	if out, code := run(dir, "log", "--root", "/nonexistent/root"); code != 2 || !strings.Contains(out, "not a root") {
		t.Errorf("log --root /nonexistent/root with no daemon: exit %d\n%s\nwant 2 and why", code, out)
	}

	// A busy port: said, with the way out.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if out, code := run(dir, "ui", "--listen", busy.Addr().String()); code == 0 || !strings.Contains(out, "--listen 127.0.0.1:0") {
		t.Errorf("ui on a busy port: exit %d\n%s", code, out)
	}

	// --help: everyday first, the seeds' tools under their own heading.
	help, _ := exec.Command(memwatchFast, "--help").Output()
	out = string(help)
	daily, tools := strings.Index(out, "Everyday:"), strings.Index(out, "The seeds' memory tools")
	if daily < 0 || tools < daily || strings.Index(out, "  recall ") > tools || strings.Index(out, "  stamp ") < tools {
		t.Errorf("--help groups:\n%s", out)
	}
}
