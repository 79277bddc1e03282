package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/rewrite/writertest"
	"github.com/memwatch/memwatch/state"
)

// startMemory is an oversize now-history memory.md whose History entries
// are older than anything a writer adds, so compactions keep the writer's.
func startMemory(entries int) string {
	var b strings.Builder
	b.WriteString("# now\n\n## State | writers test\n- runs: 1\n\n# History\n\n")
	for i := range entries {
		fmt.Fprintf(&b, "## 2025-06-01-%04d | old %d\n- %s\n\n", i, i, strings.Repeat("x", 200))
	}
	return b.String()
}

// TestWritersAgainstTheDaemon runs every kind of writer, each as its own
// process on its own root, against the real memwatch compacting with
// cooldown 0, and checks that every entry written is afterwards in
// memory.md or an archive.
func TestWritersAgainstTheDaemon(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n    settle: 20ms\n    cooldown: 0s\n    max_size: 1KiB\n    keep_history: 3\n", filepath.Join(dir, "apps", "*")))
	type run struct {
		kind writertest.Kind
		root string
		n    int
		done <-chan error
	}
	var runs []*run
	for _, k := range writertest.Kinds {
		root := filepath.Join(dir, "apps", k.Name)
		os.MkdirAll(root, 0o755)
		os.WriteFile(filepath.Join(root, "memory.md"), []byte(startMemory(30)), 0o644)
		runs = append(runs, &run{kind: k, root: root, n: k.N * writertest.Scale()})
	}
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	for _, r := range runs {
		r.done = writertest.Start(t, r.kind.Name, filepath.Join(r.root, "memory.md"), r.n, r.kind.Every)
	}
	for _, r := range runs {
		if err := <-r.done; err != nil {
			t.Fatalf("writer %s: %v", r.kind.Name, err)
		}
	}
	time.Sleep(500 * time.Millisecond) // let the last compaction finish
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, r := range runs {
		seen := writertest.Seen(t, r.root)
		lost := writertest.Lost(seen, r.kind.Name, r.n)
		archives, _ := filepath.Glob(filepath.Join(r.root, "memory", "*.md"))
		t.Logf("%s: %d writes, %d archives, lost %d", r.kind.Name, r.n, len(archives), len(lost))
		if len(lost) > 0 {
			t.Errorf("%s: lost %d of %d writes, first %v", r.kind.Name, len(lost), r.n, lost[:min(len(lost), 5)])
		}
		if !r.kind.Held && len(archives) < 3 {
			t.Errorf("%s: %d compactions; the test did not exercise the race", r.kind.Name, len(archives))
		}
		if r.kind.Held {
			recs, _ := db.Journal(context.Background(), state.Filter{Root: r.root, Rule: "compact", Outcome: state.Skipped})
			deferred := false
			for _, rec := range recs {
				deferred = deferred || strings.Contains(rec.Reason, "being written continuously") && strings.Contains(rec.Reason, "deferred")
			}
			if !deferred {
				t.Errorf("%s: no journal record says the compaction was deferred (%d skipped records)", r.kind.Name, len(recs))
			}
		}
	}
}

// TestOversizeResultDoesNotArchivePerWrite: when what a compaction keeps is
// itself over max_size, memwatch waits until the file has grown by regrow
// (a quarter of max_size by default) before compacting again, instead of
// archiving the whole file after every write of the agent.
func TestOversizeResultDoesNotArchivePerWrite(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "apps", "a")
	os.MkdirAll(root, 0o755)
	// "# now" alone is over max_size: no compaction can get under it.
	now := "# now\n\n## State | big\n" + strings.Repeat("- a fact that stays\n", 300) + "\n# History\n\n"
	os.WriteFile(filepath.Join(root, "memory.md"), []byte(now), 0o644)
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: apps\n    layout: now-history\n    paths: [%q]\n    settle: 20ms\n    cooldown: 0s\n    max_size: 4KiB\n    keep_history: 3\n", filepath.Join(dir, "apps", "*")))
	p := start(t, "--policy", pol, "--state-dir", filepath.Join(dir, "state"))
	p.waitLog("ready", 10*time.Second)
	const writes = 300
	if err := <-writertest.Start(t, "reopen", filepath.Join(root, "memory.md"), writes, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	archives, _ := filepath.Glob(filepath.Join(root, "memory", "*.md"))
	// Each write adds about 45 bytes; regrow is 1 KiB: about one compaction
	// per 23 writes, 14 for 300. Without the wait it was one per write.
	const bound = 20
	t.Logf("%d writes of about %d bytes: %d archives (bound %d)", writes, len(writertest.Line("reopen", 100)), len(archives), bound)
	if len(archives) > bound {
		t.Errorf("%d archives for %d writes, want at most %d", len(archives), writes, bound)
	}
	if lost := writertest.Lost(writertest.Seen(t, root), "reopen", writes); len(lost) > 0 {
		t.Errorf("lost %d writes", len(lost))
	}
}
