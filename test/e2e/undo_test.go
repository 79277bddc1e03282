package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
)

// overLimitMemory is a Claude Code MEMORY.md of 260 facts: over the 200
// lines Claude Code loads, so memwatch compresses it into itself and a
// topic file.
func overLimitMemory() string {
	var b strings.Builder
	b.WriteString("# Memory\n\n")
	for i := range 260 {
		fmt.Fprintf(&b, "- 2026-10-%02d fact number %d about the billing service\n", i%28+1, i)
	}
	return b.String()
}

// TestUndoRedoTheWholeAction: a Claude Code MEMORY.md over its 200 lines is
// compressed into itself and a topic file, one action of two records. The
// undo of either says both files, the versions credit both writes to
// memwatch, and redo lets the whole action run again: no hold left on the
// topic file, the compression made anew.
func TestUndoRedoTheWholeAction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	project := filepath.Join(dir, "home", ".claude", "projects", "-src-billing")
	memDir := filepath.Join(project, "memory")
	os.MkdirAll(memDir, 0o755)
	b := overLimitMemory()
	mem := filepath.Join(memDir, "MEMORY.md")
	os.WriteFile(mem, []byte(b), 0o644)
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: cc\n    preset: claude-code\n    paths: [%q]\n    settle: 50ms\n", filepath.Join(dir, "home", ".claude", "projects", "*")))
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)

	cli := func(args ...string) (string, error) {
		out, err := exec.Command(memwatchBin, append(args, "--policy", pol, "--state-dir", stateDir)...).CombinedOutput()
		return string(out), err
	}
	compressions := func() []state.Record {
		out, err := exec.Command(memwatchBin, "log", "--json", "--rule", "compress-memory", "--policy", pol, "--state-dir", stateDir).Output()
		if err != nil {
			return nil
		}
		var recs []state.Record
		json.Unmarshal(out, &recs)
		return recs
	}
	var recs []state.Record
	waitUntil(t, 10*time.Second, func() bool { recs = compressions(); return len(recs) == 2 })
	var memRec, topicRec state.Record
	for _, r := range recs {
		if r.Target == "memory/MEMORY.md" {
			memRec = r
		} else {
			topicRec = r
		}
	}
	if memRec.ID == 0 || !strings.HasPrefix(topicRec.Target, "memory/memory-older-") {
		t.Fatalf("compression records: %+v, want MEMORY.md and a memory-older topic file", recs)
	}

	out, err := cli("undo", "--dry-run", fmt.Sprint(memRec.ID))
	if err != nil || !strings.Contains(out, topicRec.Target) {
		t.Errorf("undo --dry-run %d: %v\n%s\nwant it to name %s too, undone with it", memRec.ID, err, out, topicRec.Target)
	}
	out, err = cli("undo", fmt.Sprint(memRec.ID))
	if err != nil {
		t.Fatalf("undo %d: %v\n%s", memRec.ID, err, out)
	}
	for _, want := range []string{"restored memory/MEMORY.md", "removed " + topicRec.Target} {
		if !strings.Contains(out, want) {
			t.Errorf("undo %d said:\n%s\nwant %q: every file it changed is named", memRec.ID, out, want)
		}
	}
	if got, _ := os.ReadFile(mem); string(got) != b {
		t.Errorf("MEMORY.md after the undo is not what the agent wrote")
	}
	var st control.Status
	waitUntil(t, 5*time.Second, func() bool {
		o, err := exec.Command(memwatchBin, "status", "--json", "--policy", pol, "--state-dir", stateDir).Output()
		return err == nil && json.Unmarshal(o, &st) == nil && len(st.Holds) == 2
	})
	if len(st.Holds) != 2 {
		t.Fatalf("holds after the undo: %+v, want MEMORY.md and the topic file", st.Holds)
	}

	// Redo of the topic file's record ends the action's holds, both.
	out, err = cli("redo", fmt.Sprint(topicRec.ID))
	if err != nil || !strings.Contains(out, "memory/MEMORY.md") || !strings.Contains(out, topicRec.Target) {
		t.Fatalf("redo %d: %v\n%s\nwant both files to apply again", topicRec.ID, err, out)
	}
	waitUntil(t, 10*time.Second, func() bool { return len(compressions()) == 4 })
	if n := len(compressions()); n != 4 {
		t.Errorf("after redo: %d compression records, want the action made again (4)", n)
	}
	var after control.Status
	if o, err := exec.Command(memwatchBin, "status", "--json", "--policy", pol, "--state-dir", stateDir).Output(); err == nil && json.Unmarshal(o, &after) == nil && len(after.Holds) != 0 {
		t.Errorf("holds after redo: %+v, want none", after.Holds)
	}

	// Every write after the agent's first is memwatch's, undo included.
	var vs []versions.Version
	waitUntil(t, 5*time.Second, func() bool { vs = listVersions(t, pol, stateDir, mem); return len(vs) >= 4 })
	for _, v := range vs[1:] {
		if v.Writer != versions.ByMemwatch {
			t.Errorf("MEMORY.md version %d (%+d -%d) credited to %s, want memwatch: %+v", v.N, v.Added, v.Removed, v.Writer, vs)
		}
	}
}
