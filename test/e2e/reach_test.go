package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memwatch/memwatch/state"
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

// TestReachEverythingMemoryHolds: what memwatch moved out of MEMORY.md
// (memory-older-*.md) is found and cited there, marked moved; a compressed
// archive is searched and shown decompressed; an entry the agent wrote
// four times in HISTORY.md is one result with three copies; a message's
// result has its date in the text and its timestamp in --json; show
// prints a message as role: text, --raw the line, and a missing line
// exits non-zero.
func TestReachEverythingMemoryHolds(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "ws", "p")
	os.MkdirAll(filepath.Join(root, "sessions"), 0o755)
	os.MkdirAll(filepath.Join(root, "memory"), 0o755)
	var mem strings.Builder
	mem.WriteString("# Memory\n\n")
	for i := range 300 {
		if i == 3 {
			mem.WriteString("- the staging cluster is stg-okapi-3\n")
			continue
		}
		fmt.Fprintf(&mem, "- fact %d about the service\n", i)
	}
	os.WriteFile(filepath.Join(root, "MEMORY.md"), []byte(mem.String()), 0o644)
	entry := "## 2026-11-20T10:00:00.000Z\n[2026-11-20 10:00] we chose the wombat-queue for billing events\n"
	os.WriteFile(filepath.Join(root, "HISTORY.md"), []byte("# History\n\n"+strings.Repeat(entry+"\n", 4)), 0o644)
	os.WriteFile(filepath.Join(root, "sessions", "s1.jsonl"), []byte(`{"role":"user","content":"hello"}`+"\n"+`{"role":"assistant","content":"the quokka-ledger moved to postgres","timestamp":"2026-11-21T09:30:00Z"}`+"\n"), 0o644)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("# Facts moved out\n- the ostrich-relay was retired\n"))
	zw.Close()
	os.WriteFile(filepath.Join(root, "memory", "MEMORY-pruned-2026-10.md.gz"), gz.Bytes(), 0o644)
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf(`stores:
  - name: mh
    layout: memory-history
    paths: [%q]
    settle: 30ms
    consolidate: false
    memory_max_lines: 100
    link_pruned: true
`, filepath.Join(dir, "ws", "*")))
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	waitJournal(t, stateDir, 30*time.Second, "the compression", func(r state.Record) bool {
		return r.Rule == "compress-memory" && r.Outcome == state.Done && r.Target == "MEMORY.md"
	})
	older, _ := filepath.Glob(filepath.Join(root, "memory-older-*.md"))
	if len(older) != 1 {
		t.Fatalf("no memory-older file: %v", older)
	}
	run := func(args ...string) (string, int) {
		cmd := exec.Command(memwatchFast, args...)
		cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+stateDir)
		out, err := cmd.Output()
		return string(out), exitCode(err)
	}
	var res []struct {
		Citation, Text, Moved string
		Time                  time.Time
		Copies                int
		Folded                []string
	}
	recallJSON := func(q string) {
		t.Helper()
		out, code := run("recall", "--policy", pol, "--dir", root, "--json", q)
		res = nil
		if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
			t.Fatalf("recall %q: exit %d %v\n%s", q, code, err, out)
		}
	}
	recallJSON("stg-okapi-3")
	if len(res) != 1 || !strings.HasPrefix(res[0].Citation, filepath.Base(older[0])+"#L") || res[0].Moved != "moved" {
		t.Errorf("a fact moved out of MEMORY.md: %+v, want it cited in %s, marked moved", res, filepath.Base(older[0]))
	} else if out, code := run("show", "--policy", pol, "--dir", root, res[0].Citation); code != 0 || !strings.Contains(out, "stg-okapi-3") {
		t.Errorf("show %s: exit %d\n%s", res[0].Citation, code, out)
	}
	recallJSON("ostrich-relay")
	if len(res) != 1 || res[0].Citation != "memory/MEMORY-pruned-2026-10.md.gz#L2" {
		t.Errorf("a compressed archive: %+v", res)
	} else if out, code := run("show", "--policy", pol, "--dir", root, res[0].Citation); code != 0 || !strings.Contains(out, "ostrich-relay was retired") {
		t.Errorf("show %s: exit %d\n%s", res[0].Citation, code, out)
	}
	recallJSON("wombat-queue")
	// Three more in HISTORY.md, and its monthly mirror's.
	if len(res) != 1 || res[0].Copies != 4 || !strings.HasPrefix(res[0].Citation, "HISTORY.md#L") || !slices.Contains(res[0].Folded, "HISTORY-2026-11.md#L2") ||
		len(slices.DeleteFunc(slices.Clone(res[0].Folded), func(c string) bool { return !strings.HasPrefix(c, "HISTORY.md#L") })) != 3 {
		t.Errorf("an entry written four times: %+v, want one result with its three copies in HISTORY.md and the mirror's", res)
	}
	recallJSON("quokka-ledger")
	if len(res) != 1 || !res[0].Time.Equal(time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC)) || res[0].Citation != "sessions/s1.jsonl#L2" {
		t.Errorf("a message: %+v, want its timestamp", res)
	}
	if out, code := run("recall", "--policy", pol, "--dir", root, "--color", "never", "quokka-ledger"); code != 0 || !strings.Contains(out, "2026-11-21 09:30") {
		t.Errorf("a message's date in the text: exit %d\n%s", code, out)
	}
	if out, code := run("show", "--policy", pol, "--dir", root, "sessions/s1.jsonl#L2"); code != 0 || !strings.Contains(out, "assistant: the quokka-ledger moved to postgres") || strings.Contains(out, `"role"`) {
		t.Errorf("show of a message: exit %d\n%s", code, out)
	}
	if out, code := run("show", "--policy", pol, "--dir", root, "--raw", "sessions/s1.jsonl#L2"); code != 0 || !strings.Contains(out, `{"role":"assistant","content":"the quokka-ledger moved to postgres"`) {
		t.Errorf("show --raw: exit %d\n%s", code, out)
	}
	for _, c := range []string{"sessions/s1.jsonl#L9", "HISTORY.md#L9999", "nosuch.md#L1"} {
		if out, code := run("show", "--policy", pol, "--dir", root, c); code == 0 {
			t.Errorf("show %s: exit 0\n%s", c, out)
		}
	}
}
