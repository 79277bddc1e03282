package nowhistory_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/daemon/daemontest"
	"github.com/memwatch/memwatch/state"
)

// TestRunRetentionArchivesByAge: run files older than run_retention are
// moved into the archive (journaled, undoable), judged by the name's
// timestamp only when it is a real one and by the file's mtime otherwise
// or when the file was written later than its name says.
func TestRunRetentionArchivesByAge(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "apps", "a")
	run := filepath.Join(app, "memory", "run")
	os.MkdirAll(run, 0o755)
	os.WriteFile(filepath.Join(app, "memory.md"), []byte("# now\n## State | ok\n# History\n"), 0o644)
	old := time.Now().Add(-48 * time.Hour)
	files := map[string]struct {
		mtime time.Time
		gone  bool
	}{
		"2020-01-01-0000-run.md": {old, true},         // old by name and mtime
		"2020-01-02-0000-run.md": {time.Now(), false}, // old name, written a moment ago
		"2026-13-45-9999-run.md": {old, true},         // no real date in the name: mtime decides
		"2026-13-46-9999-run.md": {time.Now(), false}, // no real date, fresh
	}
	for name, f := range files {
		p := filepath.Join(run, name)
		os.WriteFile(p, []byte("run "+name+"\n"), 0o644)
		os.Chtimes(p, f.mtime, f.mtime)
	}
	stateDir := t.TempDir()
	d := daemontest.Run(t, fmt.Sprintf("version: 1\nstores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n    settle: 50ms\n    run_retention: 24h\n", filepath.Join(dir, "apps", "*")), stateDir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err1 := os.Stat(filepath.Join(run, "2020-01-01-0000-run.md"))
		_, err2 := os.Stat(filepath.Join(run, "2026-13-45-9999-run.md"))
		if err1 != nil && err2 != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("old run files were not moved out")
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.Stop()
	for name, f := range files {
		_, err := os.Stat(filepath.Join(run, name))
		if gone := err != nil; gone != f.gone {
			t.Errorf("%s: gone %v, want %v", name, gone, f.gone)
		}
	}
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, _ := db.Journal(context.Background(), state.Filter{Rule: "run-retention", Outcome: state.Done})
	if len(recs) != 2 {
		t.Fatalf("journaled removals: %d, want 2", len(recs))
	}
	for _, r := range recs {
		b, err := os.ReadFile(filepath.Join(app, r.Archive))
		if err != nil || string(b) != "run "+filepath.Base(r.Target)+"\n" {
			t.Errorf("%s: archive %s holds %q (%v)", r.Target, r.Archive, b, err)
		}
	}
}

// TestStateNotFirstIsJournaledOnce: the daemon journals a memory.md whose
// ## State is not first, once per content, however often it evaluates.
func TestStateNotFirstIsJournaledOnce(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "apps", "a")
	os.MkdirAll(app, 0o755)
	mem := filepath.Join(app, "memory.md")
	os.WriteFile(mem, []byte("# now\n## Patterns\n- p\n## State | ok\n# History\n"), 0o644)
	stateDir := t.TempDir()
	d := daemontest.Run(t, fmt.Sprintf("version: 1\nstores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n    settle: 50ms\n", filepath.Join(dir, "apps", "*")), stateDir)
	// More evaluations: unrelated files change in the root.
	for i := range 5 {
		os.WriteFile(filepath.Join(app, fmt.Sprintf("note%d.txt", i)), []byte("x"), 0o644)
		time.Sleep(150 * time.Millisecond)
	}
	d.Stop()
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, _ := db.Journal(context.Background(), state.Filter{Rule: "state-first"})
	if len(recs) != 1 || !strings.Contains(recs[0].Reason, "## State (L4) is not the first section") {
		t.Errorf("state-first records: %+v, want one", recs)
	}
}
