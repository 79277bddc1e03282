package memoryhistory_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/markdown"
)

// structuredMemory is a MEMORY.md as people keep them: code blocks (one
// holding a pinned line), a table, nested lists, a ## Pinned section and a
// ## Not pinned one of dated entries, over 200 lines.
func structuredMemory() (src string, units []string, pins []string) {
	var b strings.Builder
	add := func(unit string) {
		b.WriteString(unit)
		units = append(units, unit)
	}
	b.WriteString("# Memory\n\n## Pinned\n")
	pins = append(pins, "- Never deploy on Fridays")
	add("- Never deploy on Fridays\n")
	b.WriteString("\n## Build\n\n")
	add("```sh\n# build the release\nmake release\nmake test\n```\n")
	b.WriteString("\n")
	add("```go\n// the retry loop\nfor i := range 3 { <!-- pin -->\n}\n```\n")
	pins = append(pins, "for i := range 3 { <!-- pin -->")
	b.WriteString("\n## Services\n\n")
	add("| service | port |\n|---|---|\n| api | 8080 |\n| web | 3000 |\n")
	b.WriteString("\n## Not pinned\n")
	for d := 1; d <= 60; d++ {
		add(fmt.Sprintf("- 2026-%02d-%02d deployed build %d\n  - rolled out to stg-%d\n    - checked by the on-call\n", d/28+1, d%28+1, d, d%3))
	}
	b.WriteString("\n## Notes\n")
	for i := range 20 {
		add(fmt.Sprintf("Paragraph %d about the service,\nwhich goes on a second line.\n", i))
		b.WriteString("\n")
	}
	return b.String(), units, pins
}

// TestCompressionMovesWholeUnits: the compression of a structured
// MEMORY.md over memory_max_lines moves whole units to its topic file:
// fences balance in both files, every unit is whole in one of them, no
// line is in neither, the pinned lines stay, and ## Not pinned's oldest
// entries go before its newer ones.
func TestCompressionMovesWholeUnits(t *testing.T) {
	ws := t.TempDir()
	src, units, pins := structuredMemory()
	if n := strings.Count(src, "\n"); n < 250 {
		t.Fatalf("the memory has %d lines, want over 250", n)
	}
	os.WriteFile(filepath.Join(ws, "MEMORY.md"), []byte(src), 0o644)
	run(t, policyFor(ws, "", "    memory_max_lines: 120\n    link_pruned: true\n    consolidate: false\n"), t.TempDir())
	waitFor(t, "the compression", 10*time.Second, func() bool { return strings.Count(read(filepath.Join(ws, "MEMORY.md")), "\n") <= 120 })
	live := read(filepath.Join(ws, "MEMORY.md"))
	topics, _ := filepath.Glob(filepath.Join(ws, "memory-older-*.md"))
	if len(topics) != 1 {
		t.Fatalf("topic files %v, want one", topics)
	}
	topic := read(topics[0])
	for name, f := range map[string]string{"MEMORY.md": live, "the topic file": topic} {
		if !markdown.FencesBalance([]byte(f)) {
			t.Errorf("%s has a code block that does not close:\n%s", name, f)
		}
	}
	for _, u := range units {
		if !strings.Contains(live, u) && !strings.Contains(topic, u) {
			t.Errorf("unit %q is whole in neither file", u)
		}
	}
	have := map[string]bool{}
	for _, l := range strings.Split(live+topic, "\n") {
		have[l] = true
	}
	for _, l := range strings.Split(src, "\n") {
		if !have[l] {
			t.Errorf("line %q is in neither file", l)
		}
	}
	for _, p := range pins {
		if !strings.Contains(live, p+"\n") {
			t.Errorf("pinned line %q left MEMORY.md", p)
		}
	}
	if !strings.Contains(live, "make release") {
		t.Error("the code block holding a pinned line did not stay whole")
	}
	// The oldest of ## Not pinned went, the newest stayed.
	if strings.Contains(live, "deployed build 1\n") || !strings.Contains(live, "deployed build 60\n") {
		t.Errorf("## Not pinned: want its oldest entries moved and its newest kept:\n%s", live)
	}
}

// TestCompressionWithAFencedBlock: a MEMORY.md over memory_max_size that
// holds a fenced block is compressed under it at its next change, and no
// fact is in both files.
func TestCompressionWithAFencedBlock(t *testing.T) {
	ws := t.TempDir()
	var b strings.Builder
	b.WriteString("# Memory\n\n## Setup\n```\n# comment\nnpm ci\n```\n\n## Facts\n")
	for i := range 60 {
		fmt.Fprintf(&b, "- fact %d about the billing service and its deploys\n", i)
	}
	src := b.String()
	os.WriteFile(filepath.Join(ws, "MEMORY.md"), []byte(src), 0o644)
	run(t, policyFor(ws, "", "    memory_max_size: 2KiB\n    consolidate: false\n"), t.TempDir())
	waitFor(t, "the compression", 10*time.Second, func() bool { return len(read(filepath.Join(ws, "MEMORY.md"))) <= 2048 })
	live := read(filepath.Join(ws, "MEMORY.md"))
	pruned, _ := filepath.Glob(filepath.Join(ws, "memory", "MEMORY-pruned-*.md"))
	if len(pruned) != 1 {
		t.Fatalf("pruned files %v, want one", pruned)
	}
	moved := read(pruned[0])
	for _, l := range strings.Split(live, "\n") {
		if strings.HasPrefix(l, "- fact") && strings.Contains(moved, l+"\n") {
			t.Errorf("%q is in both files", l)
		}
	}
	if !markdown.FencesBalance([]byte(live)) || !markdown.FencesBalance([]byte(moved)) {
		t.Errorf("fences do not balance:\n%s\n---\n%s", live, moved)
	}
	// The next change: still under, nothing new in the pruned file twice.
	os.WriteFile(filepath.Join(ws, "MEMORY.md"), []byte(live+"- a new fact after the compression\n"), 0o644)
	time.Sleep(500 * time.Millisecond)
	waitFor(t, "MEMORY.md within its limit", 10*time.Second, func() bool { return len(read(filepath.Join(ws, "MEMORY.md"))) <= 2048 })
	for i := range 60 {
		l := fmt.Sprintf("- fact %d about the billing service and its deploys\n", i)
		if n := strings.Count(read(filepath.Join(ws, "MEMORY.md"))+read(pruned[0]), l); n != 1 {
			t.Errorf("%q is in the two files %d times, want once", l, n)
		}
	}
}
