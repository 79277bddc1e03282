package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestEvaluationFollowsChanges: after a root's first pass through every
// log, the evaluation an append starts goes through the log written, not
// through every log again (layout.FollowingChanges, Scans.Changed).
func TestEvaluationFollowsChanges(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "projects", "p")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	line := `{"type":"user","message":{"role":"user","content":"hello %d"},"uuid":"u%d"}` + "\n"
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("s%02d.jsonl", i)), fmt.Appendf(nil, line, i, i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := testDaemon(t, fmt.Sprintf("version: 1\nstores:\n  - name: cc\n    preset: claude-code\n    paths: [%q]\n    settle: 50ms\n", filepath.Join(dir, "projects", "*")))
	pass := func() (full time.Time, seen, seq uint64) {
		full, seq, seen = d.scans.Followed(root)
		return full, seen, seq
	}
	deadline := time.Now().Add(30 * time.Second)
	for full, _, _ := pass(); full.IsZero() && time.Now().Before(deadline); full, _, _ = pass() {
		time.Sleep(20 * time.Millisecond)
	}
	// The start's work done (its evaluations, the captures and indexing
	// they queued): what comes after is the append's.
	for time.Now().Before(deadline) {
		if n, err := d.engine.Pending(t.Context()); err == nil && n == 0 && d.bg.Queued.Load() == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	full, _, seq := pass()
	if full.IsZero() {
		t.Fatal("no pass through every log within 30 s")
	}
	f, err := os.OpenFile(filepath.Join(root, "s07.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, line, 100, 100)
	f.Close()
	var seen, now uint64
	for time.Now().Before(deadline) {
		if _, seen, now = pass(); now > seq && seen >= now {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	after, _, _ := pass()
	if now <= seq || seen < now {
		t.Fatalf("got the change %d of the root (%d before the append) gone through up to %d, want the append told and gone through", now, seq, seen)
	}
	if !after.Equal(full) {
		t.Errorf("got a pass through every log at %v after the append (the last at %v), want the written log's alone", after, full)
	}
}
