package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolRounds is a newer Claude Code session in which the agent asked
// memwatch three times about question, with recall_memory and
// recall_show, each answered in memwatch's own words.
func toolRounds(project, root, question, answer string) string {
	var b strings.Builder
	n := 0
	line := func(typ string, content any) {
		n++
		l, _ := json.Marshal(map[string]any{"type": typ, "message": map[string]any{"role": typ, "content": content},
			"uuid": fmt.Sprintf("t%d", n), "timestamp": fmt.Sprintf("2026-11-21T09:%02d:00.000Z", n), "cwd": project, "sessionId": "s-tools"})
		b.Write(l)
		b.WriteByte('\n')
	}
	found := fmt.Sprintf("Found 1 result(s) for: %q\n\n[1] Source: messages\n    Line: 2\n    Date: 2026-11-20 10:01 UTC\n    Project: billing\n    Content: assistant: %s\n    Citation: %s#L2\n",
		question, answer, filepath.Join(root, "5f2e-billing.jsonl"))
	shown := fmt.Sprintf("%s (lines 1 to 3; the cited ones marked >)\n  L1: user: %s\n> L2: assistant: %s\n", filepath.Join(root, "5f2e-billing.jsonl"), question, answer)
	line("user", question)
	for i := range 3 {
		line("assistant", []map[string]any{{"type": "tool_use", "id": fmt.Sprintf("toolu_r%d", i), "name": "mcp__memwatch__recall_memory", "input": map[string]any{"query": question}}})
		line("user", []map[string]any{{"type": "tool_result", "tool_use_id": fmt.Sprintf("toolu_r%d", i), "content": []map[string]any{{"type": "text", "text": found}}}})
		line("assistant", []map[string]any{{"type": "tool_use", "id": fmt.Sprintf("toolu_s%d", i), "name": "mcp__memwatch__recall_show", "input": map[string]any{"citation": filepath.Join(root, "5f2e-billing.jsonl") + "#L2", "context": 1}}})
		line("user", []map[string]any{{"type": "tool_result", "tool_use_id": fmt.Sprintf("toolu_s%d", i), "content": shown}})
	}
	return b.String()
}

// TestRecallFidelity: what issue [fidelity] saw in a Claude Code home.
//   - A newer session holds three rounds of the agent calling recall_memory
//     and recall_show on the question: memwatch recall and MCP
//     recall_memory rank the original answer first and list none of the
//     tool lines.
//   - From src/billing/render/pdf recall searches the billing project and
//     says so; --dir src/billing finds the answer (exit 0); --dir
//     ROOT/sub searches that folder alone; each the same with and
//     without the daemon.
//   - A word on 8 lines with the default limit: stderr says 3 more.
func TestRecallFidelity(t *testing.T) {
	home, billing, root := claudeHome(t)
	const question = "which cluster does billing deploy to?"
	const answer = "Billing deploys to the eu-west-2 cluster, prod-eu, through the blue-green pipeline."
	os.WriteFile(filepath.Join(root, "9a1c-tools.jsonl"), []byte(toolRounds(billing, root, question, answer)), 0o644)
	// Codex keeps its sessions by date: a folder inside its root.
	codex := filepath.Join(home, ".codex")
	sub := filepath.Join(codex, "sessions", "2026", "11", "28")
	os.MkdirAll(sub, 0o755)
	var eight strings.Builder
	fmt.Fprintf(&eight, `{"timestamp":"2026-11-28T10:00:00Z","type":"session_meta","payload":{"id":"r1","cwd":%q}}`+"\n", filepath.Join(home, "src", "web"))
	for i := range 8 {
		fmt.Fprintf(&eight, `{"timestamp":"2026-11-28T10:%02d:00Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"note %d about the quokkaword here"}]}}`+"\n", i+1, i)
	}
	os.WriteFile(filepath.Join(sub, "rollout-2026-11-28T10-00-00-r1.jsonl"), []byte(eight.String()), 0o644)
	older := filepath.Join(codex, "sessions", "2026", "11", "20")
	os.MkdirAll(older, 0o755)
	os.WriteFile(filepath.Join(older, "rollout-2026-11-20T10-00-00-r0.jsonl"), []byte(`{"timestamp":"2026-11-20T10:00:00Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"an older quokkaword and eu-west-2"}]}}`+"\n"), 0o644)
	deep := filepath.Join(billing, "render", "pdf")
	os.MkdirAll(deep, 0o755)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if out, err := exec.Command(memwatchFast, "init", "--home", home, "--write", pol).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	stateDir := filepath.Join(t.TempDir(), "state")
	env := append(os.Environ(), "HOME="+home, "MEMWATCH_STATE_DIR="+stateDir)
	recallAt := func(dir string, args ...string) (string, string, int) {
		cmd := exec.Command(memwatchFast, append([]string{"recall", "--policy", pol, "--color", "never"}, args...)...)
		cmd.Dir, cmd.Env = dir, env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return string(out), stderr.String(), exitCode(err)
	}
	noTools := func(how, out string) {
		t.Helper()
		for _, bad := range []string{"recall_memory", "recall_show", "result(s) for", "cited ones marked"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s: memwatch's own tool traffic is listed (%q):\n%s", how, bad, out)
			}
		}
	}
	check := func(how string) {
		t.Helper()
		out, stderr, code := recallAt(deep, question)
		first, _, _ := strings.Cut(out, "\n\n")
		if code != 0 || !strings.Contains(first, "5f2e-billing.jsonl#L2") || !strings.Contains(first, "eu-west-2") {
			t.Errorf("%s: from %s the original answer is not first: exit %d\n%s\n%s", how, deep, code, out, stderr)
		}
		if !strings.Contains(stderr, "the memory of project "+billing) {
			t.Errorf("%s: from %s recall does not search the billing project: %s", how, deep, stderr)
		}
		noTools(how, out)
		if out, stderr, code := recallAt(home, "--dir", billing, "deploy"); code != 0 || !strings.Contains(out, "eu-west-2") {
			t.Errorf("%s: --dir %s: exit %d\n%s\n%s", how, billing, code, out, stderr)
		}
		out, stderr, code = recallAt(home, "--dir", sub, "--limit", "20", "quokkaword")
		if code != 0 || strings.Count(out, "quokkaword") != 8 || strings.Contains(out, "eu-west-2") {
			t.Errorf("%s: --dir %s: exit %d, want its 8 lines alone\n%s\n%s", how, sub, code, out, stderr)
		}
		if out, stderr, _ := recallAt(home, "--dir", sub, "quokkaword"); strings.Count(out, "quokkaword") != 5 || !strings.Contains(stderr, "3 more") {
			t.Errorf("%s: 8 lines, the default limit: stderr does not say 3 more\n%s\n%s", how, out, stderr)
		}
	}
	check("without a daemon")
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("caught up: every root evaluated, its logs captured and indexed", 60*time.Second)
	check("with the daemon")

	// MCP, started by the agent in its project's directory.
	cmd := exec.Command(memwatchBin, "mcp", "--policy", pol)
	cmd.Dir, cmd.Env, cmd.Stderr = billing, env, os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "recall_memory", Arguments: map[string]any{"query": question, "limit": 10}})
	if err != nil || res.IsError {
		t.Fatalf("recall_memory: %v %+v", err, res)
	}
	got := res.Content[0].(*mcp.TextContent).Text
	one := strings.SplitN(got, "[2]", 2)[0]
	if !strings.Contains(one, "5f2e-billing.jsonl#L2") {
		t.Errorf("MCP recall_memory: the original answer is not first:\n%s", got)
	}
	if strings.Count(got, "recall_memory") > 0 || strings.Count(got, "cited ones marked") > 0 || strings.Count(got, "Found 1 result(s)") > 0 {
		t.Errorf("MCP recall_memory lists memwatch's own tool traffic:\n%s", got)
	}
}
