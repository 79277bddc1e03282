package memoryhistory_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/layout/memoryhistory"
)

// pinnedMemory is a MEMORY.md of 300 facts with a ## Pinned section of
// three rules and a <!-- pin --> line among the facts.
func pinnedMemory() (string, []string) {
	pins := []string{
		"- Never run migrations during business hours",
		"- Always page the on-call before a rollback",
		"- Do not deploy billing on Fridays",
		"- the staging cluster is stg-3 <!-- pin -->",
	}
	var b strings.Builder
	b.WriteString("# Memory\n\n## Pinned rules\n")
	for _, p := range pins[:3] {
		b.WriteString(p + "\n")
	}
	b.WriteString("\n## Facts\n")
	for i := range 300 {
		if i == 150 {
			b.WriteString(pins[3] + "\n")
		}
		fmt.Fprintf(&b, "- [2026-01-%02d] fact %d about the service\n", i%28+1, i)
	}
	return b.String(), pins
}

// The offline compression never moves a pinned line, and gets the file
// within its 100 lines; the moved facts say so on the record.
func TestPruneKeepsPinned(t *testing.T) {
	src, pins := pinnedMemory()
	out, _ := memoryhistory.Prune([]byte(src), 1<<20, 100)
	got := string(out)
	for _, p := range pins {
		if !strings.Contains(got, p+"\n") {
			t.Errorf("pinned line %q is gone:\n%s", p, got)
		}
	}
	if n := strings.Count(got, "\n"); n > 100 {
		t.Errorf("%d lines after the compression, want at most 100", n)
	}
	// Rules outside a pinned section go last; dated entries first.
	src = "# Memory\n\n## Conventions\n- one migration per table\n- tabs in Makefiles\n\n## Log\n" + strings.Repeat("- [2026-01-02] deployed\n", 1) +
		"- [2026-01-03] rolled back\n- [2026-01-04] deployed again\n\n## Facts\n- the db is postgres 15\n"
	out, _ = memoryhistory.Prune([]byte(src), 1<<20, 10)
	if got := string(out); !strings.Contains(got, "one migration per table") || !strings.Contains(got, "the db is postgres") || strings.Contains(got, "rolled back") {
		t.Errorf("dated entries should go first, rules last:\n%s", got)
	}
}

// An LLM answer that drops a pinned line is rejected: the offline
// compression runs instead, and every pinned line stays.
func TestLLMMustKeepPinned(t *testing.T) {
	src, pins := pinnedMemory()
	// The model drops the first rule (and is otherwise a fine answer).
	var answer strings.Builder
	answer.WriteString("# Memory\n\n## Pinned rules\n" + pins[1] + "\n" + pins[2] + "\n\n## Facts\n" + pins[3] + "\n- the service runs on Go\n")
	srv := llmtest.New(t, llmtest.Step{Content: answer.String(), Tokens: 100})
	ws := t.TempDir()
	stateDir := t.TempDir()
	os.WriteFile(filepath.Join(ws, "MEMORY.md"), []byte(src), 0o644)
	run(t, policyFor(ws, srv.BaseURL(), "    memory_max_lines: 100\n    consolidate: false\n"), stateDir)
	waitFor(t, "the compression", 10*time.Second, func() bool { return strings.Count(read(filepath.Join(ws, "MEMORY.md")), "\n") <= 100 })
	got := read(filepath.Join(ws, "MEMORY.md"))
	for _, p := range pins {
		if !strings.Contains(got, p+"\n") {
			t.Errorf("pinned line %q is gone:\n%s", p, got)
		}
	}
	if srv.Calls() == 0 {
		t.Error("the model was never asked")
	}
	if strings.Contains(got, "the service runs on Go") {
		t.Error("the model's answer, which dropped a pinned line, was written")
	}
	prompt := srv.Requests()[0].Messages[0].Content
	if !strings.Contains(prompt, "<!-- pin -->") || !strings.Contains(prompt, "pinned") {
		t.Errorf("the prompt does not ask to keep the pinned lines:\n%s", prompt)
	}
}
