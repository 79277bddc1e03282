//go:build !lean

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// claudeHome is a home with Claude Code's projects (as Claude Code 2.x
// writes ~/.claude/projects/<the project's directory, / as ->/<uuid>.jsonl):
// billing, whose conversation says where it deploys, and two others.
func claudeHome(t *testing.T) (home, billing, root string) {
	t.Helper()
	home = t.TempDir()
	enc := regexp.MustCompile(`[^A-Za-z0-9]`)
	for _, p := range []struct{ name, q, a string }{
		{"billing", "which cluster does billing deploy to?", "Billing deploys to the eu-west-2 cluster, prod-eu, through the blue-green pipeline."},
		{"web", "how do we ship the web app?", "The web app ships from main on every merge."},
		{"notes", "remind me about lunch", "Lunch is at noon on Fridays."},
	} {
		proj := filepath.Join(home, "src", p.name)
		os.MkdirAll(proj, 0o755)
		dir := filepath.Join(home, ".claude", "projects", enc.ReplaceAllString(proj, "-"))
		os.MkdirAll(dir, 0o755)
		var b strings.Builder
		for i, m := range []struct{ role, text string }{{"user", p.q}, {"assistant", p.a}} {
			line, _ := json.Marshal(map[string]any{"type": m.role, "message": map[string]any{"role": m.role, "content": m.text},
				"uuid": fmt.Sprintf("u%d", i), "timestamp": fmt.Sprintf("2026-11-20T10:0%d:00.000Z", i), "cwd": proj, "sessionId": "s-" + p.name})
			b.Write(line)
			b.WriteByte('\n')
		}
		os.WriteFile(filepath.Join(dir, "5f2e-"+p.name+".jsonl"), []byte(b.String()), 0o644)
		if p.name == "billing" {
			billing, root = proj, dir
		}
	}
	return home, billing, root
}

// TestReachClaudeCodeProject: a Claude Code home set up by memwatch init.
// An MCP client starts memwatch mcp in the project's directory (as Claude
// Code starts its MCP servers): recall_memory is listed, and a question
// alone finds the line that answers it, cited; so with --root. From the
// home, with no flags, memwatch recall finds it too, with or without the
// daemon; a word in no memory exits 1, an unknown scope 2.
func TestReachClaudeCodeProject(t *testing.T) {
	home, billing, root := claudeHome(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if out, err := exec.Command(memwatchFast, "init", "--home", home, "--write", pol).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	stateDir := filepath.Join(t.TempDir(), "state")
	env := append(os.Environ(), "HOME="+home, "MEMWATCH_STATE_DIR="+stateDir)
	const question = "which cluster does billing deploy to?"
	mcpRecall := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(memwatchBin, append([]string{"mcp", "--policy", pol}, args...)...)
		cmd.Dir, cmd.Env, cmd.Stderr = dir, env, os.Stderr
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		tools, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, tl := range tools.Tools {
			found = found || tl.Name == "recall_memory"
		}
		if !found {
			t.Fatalf("memwatch mcp %v in %s lists no recall_memory", args, dir)
		}
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "recall_memory", Arguments: map[string]any{"query": question}})
		if err != nil || res.IsError {
			t.Fatalf("recall_memory: %v %+v", err, res)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	answer := regexp.MustCompile(`(?s)\[1\] Source: messages.*?Content: assistant: Billing deploys to the eu-west-2 cluster.*?Citation: \S*5f2e-billing\.jsonl#L2\n`)
	for _, c := range []struct {
		name, dir string
		args      []string
	}{{"in the project's directory", billing, nil}, {"with --root", "/", []string{"--root", root}}} {
		if got := mcpRecall(c.dir, c.args...); !answer.MatchString(got) {
			t.Errorf("MCP %s: recall_memory of %q:\n%s", c.name, question, got)
		}
	}
	recallAt := func(dir string, args ...string) (string, string, int) {
		cmd := exec.Command(memwatchFast, append([]string{"recall", "--policy", pol, "--color", "never"}, args...)...)
		cmd.Dir, cmd.Env = dir, env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return string(out), stderr.String(), exitCode(err)
	}
	check := func(how string) {
		t.Helper()
		out, stderr, code := recallAt(home, question)
		if code != 0 || !regexp.MustCompile(`(?m)^billing  2026-11-20 10:01  \S*5f2e-billing\.jsonl#L2\n  assistant: Billing deploys to the eu-west-2 cluster`).MatchString(out) {
			t.Errorf("%s: recall from the home with no flags: exit %d\n%s\n%s", how, code, out, stderr)
		}
		if !strings.Contains(stderr, "every root you can read") {
			t.Errorf("%s: recall does not say what it searched: %s", how, stderr)
		}
		if out, stderr, code := recallAt(billing, "deploy"); code != 0 || !strings.Contains(out, "eu-west-2") || strings.Contains(out, "web app") || !strings.Contains(stderr, "the memory of project "+billing) {
			t.Errorf("%s: recall in the project's directory: exit %d\n%s\n%s", how, code, out, stderr)
		}
		if _, _, code := recallAt(home, "zxqvbnmlkj"); code != 1 {
			t.Errorf("%s: a word in no memory: exit %d, want 1", how, code)
		}
		if _, stderr, code := recallAt(home, "--scope", "bogus", "deploy"); code != 2 || !strings.Contains(stderr, "bogus") {
			t.Errorf("%s: --scope bogus: exit %d, want 2 (%s)", how, code, stderr)
		}
	}
	check("without a daemon")
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 20*time.Second)
	p.waitLog("caught up: every root evaluated, its logs captured and indexed", 60*time.Second)
	check("with the daemon")
}
