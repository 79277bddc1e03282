package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memwatch/memwatch/state"
)

// TestHelpExamplesRun runs every example that a command's --help shows, as
// a person would paste it: through a shell, with memwatch on PATH, in the
// memory folder of a Claude Code project, with the policy memwatch init
// --write wrote and its daemon running. An example fails when memwatch
// says it is wrong (exit 2, or an error on stderr); exit 1 is "nothing
// found" (or, for secrets, "some found") and passes. A command still
// running after a while (log -f) is a follower and passes.
func TestHelpExamplesRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	project := filepath.Join(home, ".claude", "projects", "-work-billing")
	memDir := filepath.Join(project, "memory")
	os.MkdirAll(memDir, 0o755)
	os.WriteFile(filepath.Join(memDir, "MEMORY.md"), []byte(overLimitMemory()), 0o644)
	var log strings.Builder
	for i, text := range []string{
		"what did we decide about the deploy?",
		"We decided to deploy on Tuesdays, after the ratelimit change.",
		"and the rate limiter?",
		"The rate limiter keeps 100 requests a minute per key.",
	} {
		role := []string{"user", "assistant"}[i%2]
		line, _ := json.Marshal(map[string]any{"type": role, "sessionId": "s1", "cwd": "/work/billing", "timestamp": "2026-11-27T10:00:00Z",
			"message": map[string]any{"role": role, "content": text}})
		log.Write(append(line, '\n'))
	}
	os.WriteFile(filepath.Join(project, "s1.jsonl"), []byte(log.String()), 0o644)
	os.MkdirAll(filepath.Join(dir, "run"), 0o700)
	env := append(os.Environ(),
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_STATE_HOME="+filepath.Join(home, ".local", "state"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"),
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"),
		"XDG_RUNTIME_DIR="+filepath.Join(dir, "run"),
		"STATE_DIRECTORY="+filepath.Join(dir, "state"),
		// As root, init --write would write the machine's policy: the
		// test's is named, and init writes where every command looks.
		"MEMWATCH_POLICY="+filepath.Join(dir, "policy.yaml"),
		"PATH="+filepath.Dir(memwatchFast)+string(os.PathListSeparator)+os.Getenv("PATH"),
	)
	if filepath.Base(memwatchFast) != "memwatch" {
		// The race build is "memwatch"; the fast one is linked under it.
		bin := filepath.Join(dir, "bin")
		os.MkdirAll(bin, 0o755)
		os.Symlink(memwatchFast, filepath.Join(bin, "memwatch"))
		env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	help := func(args ...string) string {
		cmd := exec.Command(memwatchFast, append(args, "--help")...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("memwatch %s --help: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}

	type example struct{ command, line string }
	var examples []example
	var walk func(path []string)
	walk = func(path []string) {
		text := help(path...)
		for _, line := range helpExamples(text) {
			examples = append(examples, example{strings.Join(path, " "), line})
		}
		for _, sub := range helpCommands(text) {
			if sub != "help" && sub != "completion" {
				walk(append(append([]string{}, path...), sub))
			}
		}
	}
	walk(nil)
	if len(examples) < 25 {
		t.Fatalf("found %d examples in --help, want the everyday commands' (25+): %v", len(examples), examples)
	}

	run := func(ex example) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", ex.line)
		cmd.Dir = memDir
		cmd.Env = env
		// Its own process group, stopped whole: a follower the shell
		// started must not outlive it holding the output open.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			cancel()
			<-done
			if bad := errorLines(stderr.String()); bad != "" {
				t.Errorf("memwatch %s --help: %s\nstill running after 10 s, and said:\n%s", ex.command, ex.line, bad)
			}
			return
		}
		code := exitCode(err)
		if bad := errorLines(stderr.String()); code > 1 || bad != "" {
			t.Errorf("memwatch %s --help: %s\nexit %d\n%s%s", ex.command, ex.line, code, stdout.String(), stderr.String())
		}
	}

	// init's first: they write the policy the daemon runs.
	for _, ex := range examples {
		if ex.command == "init" {
			run(ex)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "policy.yaml")); err != nil {
		t.Fatalf("no policy after init's examples: %v", err)
	}
	p := startEnv(t, memwatchFast, env)
	p.waitLog("ready", 30*time.Second)
	waitUntil(t, 30*time.Second, func() bool {
		cmd := exec.Command(memwatchFast, "log", "--json", "--rule", "compress-memory")
		cmd.Env = env
		out, err := cmd.Output()
		var recs []state.Record
		return err == nil && json.Unmarshal(out, &recs) == nil && len(recs) >= 2
	})
	waitUntil(t, 30*time.Second, func() bool {
		cmd := exec.Command(memwatchFast, "versions", "--json", filepath.Join(memDir, "MEMORY.md"))
		cmd.Env = env
		out, err := cmd.Output()
		var vs []json.RawMessage
		return err == nil && json.Unmarshal(out, &vs) == nil && len(vs) >= 2
	})
	// In the order a person goes: look, undo and redo, then put a
	// version back; the rest after.
	order := map[string]int{"validate": 1, "status": 2, "recall": 3, "show": 4, "log": 5, "versions": 6, "diff": 7, "undo": 8, "redo": 9, "restore": 10}
	sort.SliceStable(examples, func(i, j int) bool {
		oi, oj := order[examples[i].command], order[examples[j].command]
		if oi == 0 {
			oi = 100
		}
		if oj == 0 {
			oj = 100
		}
		return oi < oj
	})
	for _, ex := range examples {
		if ex.command != "init" {
			run(ex)
		}
	}
}

// helpExamples are the command lines a --help text shows (its Examples and
// any indented "memwatch ..." line of its description), without their
// "# ..." comments; the usage lines are not examples.
func helpExamples(help string) []string {
	var out []string
	section := ""
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") {
			section = line
			continue
		}
		if section == "Usage:" || !exampleLine.MatchString(line) {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		out = append(out, strings.TrimSpace(line))
	}
	return out
}

var exampleLine = regexp.MustCompile(`^\s+memwatch\s`)

// helpCommands are the subcommands a --help text lists.
func helpCommands(help string) []string {
	var out []string
	listing := false
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " "):
			listing = line == "Available Commands:" || line == "Everyday:" || line == "Setting up and running:" || strings.HasPrefix(line, "The seeds'") || line == "More:" || line == "Additional Commands:"
		case listing:
			if m := commandLine.FindStringSubmatch(line); m != nil {
				out = append(out, m[1])
			}
		}
	}
	return out
}

var commandLine = regexp.MustCompile(`^  ([a-z][a-z0-9-]*)\s{2,}\S`)

// errorLines are the lines of stderr where memwatch says something is
// wrong.
func errorLines(stderr string) string {
	var b strings.Builder
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "memwatch: ") || strings.HasPrefix(l, "Error: ") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
