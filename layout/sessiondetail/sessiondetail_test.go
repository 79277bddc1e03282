package sessiondetail_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/daemon/daemontest"
	"github.com/memwatch/memwatch/layout/sessiondetail"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
)

func runDaemon(t *testing.T, src, stateDir string) func() {
	t.Helper()
	return daemontest.Run(t, src, stateDir).Stop
}

func appendMessages(t *testing.T, path string, from, n int) {
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	defer f.Close()
	for i := from; i < from+n; i++ {
		if i%2 == 0 {
			fmt.Fprintf(f, `{"role":"user","content":"Please update handler%d.go for the billing migration."}`+"\n", i)
		} else {
			fmt.Fprintf(f, `{"role":"assistant","content":[{"type":"text","text":"Updated handler%d.go; billing migration step %d done."},{"type":"tool_use","name":"Edit","input":{}}]}`+"\n", i-1, i)
		}
	}
}

func detailFiles(s string) []string {
	ms, _ := filepath.Glob(filepath.Join(s, "working-memory", "detail", "*-summary*.md"))
	return ms
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	daemontest.WaitFor(t, what, 8*time.Second, cond)
}

func policyFor(glob, llm string) string {
	compactor := "heuristic"
	if llm != "" {
		compactor = "llm"
		llm = fmt.Sprintf("llm:\n  default:\n    base_url: %s\n    model: fake\n    timeout: 2s\n", llm)
	}
	return fmt.Sprintf("version: 1\n%sstores:\n  - name: sessions\n    layout: session-detail\n    paths: [%q]\n    compactor: %s\n    settle: 50ms\n    summary_every: 20\n    session_idle: 2s\n    overview_max_size: 100B\n", llm, glob, compactor)
}

func TestHeuristicSummariesEveryNAndOnIdle(t *testing.T) {
	dir := t.TempDir()
	s := filepath.Join(dir, "sess-a")
	os.MkdirAll(filepath.Join(s, "working-memory"), 0o755)
	runDaemon(t, policyFor(filepath.Join(dir, "*"), ""), t.TempDir())
	appendMessages(t, filepath.Join(s, "messages.jsonl"), 0, 45)
	waitFor(t, "two summaries of 20 lines", func() bool { return len(detailFiles(s)) == 2 })
	waitFor(t, "the idle summary of the rest", func() bool { return len(detailFiles(s)) == 3 })
	var all string
	for _, f := range detailFiles(s) {
		b, _ := os.ReadFile(f)
		all += string(b)
	}
	for _, want := range []string{"messages.jsonl#L1-20 range:", "messages.jsonl#L21-40 range:", "messages.jsonl#L41-45 range:", "## Content", "META:", "- keywords: [", "User requests:", "Tools used: Edit (", "handler0.go", "billing"} {
		if !strings.Contains(all, want) {
			t.Errorf("summaries lack %q", want)
		}
	}
}

func TestLLMSummaryAndExactlyOnce(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: `{"title":"Billing migration","summary":"Migrated the billing handlers one by one.","keywords":["billing","migration","handlers"]}`, Tokens: 321})
	dir := t.TempDir()
	s := filepath.Join(dir, "sess-b")
	os.MkdirAll(filepath.Join(s, "working-memory", "detail"), 0o755)
	log := filepath.Join(s, "messages.jsonl")
	appendMessages(t, log, 0, 40)
	// As left by a memwatch killed after writing the first summary but
	// before committing its progress.
	stateDir := t.TempDir()
	marker := crashedRange(t, s, stateDir, "messages.jsonl", 20)
	os.WriteFile(filepath.Join(s, "working-memory", "detail", "2026-01-01-0000-summary.md"), []byte("# Earlier\n\n## Content\nx\n"+marker+"\n"), 0o644)
	runDaemon(t, policyFor(filepath.Join(dir, "*"), srv.BaseURL()), stateDir)
	waitFor(t, "the second summary", func() bool { return len(detailFiles(s)) == 2 })
	time.Sleep(300 * time.Millisecond)
	if srv.Calls() != 1 {
		t.Errorf("LLM calls = %d, want 1 (L1-20 was already summarized)", srv.Calls())
	}
	var second string
	for _, f := range detailFiles(s) {
		if b, _ := os.ReadFile(f); strings.Contains(string(b), "#L21-40 range:") {
			second = string(b)
		}
	}
	for _, want := range []string{"# Billing migration", `- keywords: ["billing","migration","handlers"]`, "Migrated the billing handlers", "Source: messages.jsonl#L21-40"} {
		if !strings.Contains(second, want) {
			t.Errorf("summary lacks %q:\n%s", want, second)
		}
	}
}

func TestOverviewGuardWarnsOnce(t *testing.T) {
	dir := t.TempDir()
	s := filepath.Join(dir, "sess-c")
	os.MkdirAll(filepath.Join(s, "working-memory"), 0o755)
	big := "# Working Memory\n\n" + strings.Repeat("- a long line of agent state\n", 10)
	os.WriteFile(filepath.Join(s, "working-memory", "overview.md"), []byte(big), 0o644)
	stateDir := t.TempDir()
	stop := runDaemon(t, policyFor(filepath.Join(dir, "*"), ""), stateDir)
	time.Sleep(500 * time.Millisecond)
	stop()
	out, _ := os.ReadFile(filepath.Join(s, "working-memory", "overview.md"))
	if string(out) != big {
		t.Error("memwatch rewrote the agent's overview")
	}
	// Journaled once, and not again after a restart on the same content.
	stop = runDaemon(t, policyFor(filepath.Join(dir, "*"), ""), stateDir)
	time.Sleep(500 * time.Millisecond)
	stop()
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, _ := db.Journal(context.Background(), state.Filter{Rule: sessiondetail.RuleOverview})
	if len(recs) != 1 || recs[0].Outcome != state.Skipped || !strings.Contains(recs[0].Reason, "over overview_max_size 100") {
		t.Errorf("overview warnings in the journal = %+v, want exactly one", recs)
	}
}

// crashedRange captures rel into the spool of stateDir and returns the
// marker a summary of its first n messages carries.
func crashedRange(t *testing.T, dir, stateDir, rel string, n int) string {
	t.Helper()
	ctx := context.Background()
	sp, err := spool.Open(ctx, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := sp.Capture(ctx, root, rel, spool.Options{IsMessage: session.IsMessage}); err != nil {
		t.Fatal(err)
	}
	st, _, _ := sp.Find(ctx, root.ID(), rel)
	var lines []spool.Line
	sp.Read(ctx, st.ID, 0, int64(n), func(l spool.Line) error { lines = append(lines, l); return nil })
	return fmt.Sprintf("<!-- memwatch: %s range:%s -->", spool.Cite(rel, lines), spool.RangeID(rel, lines))
}
