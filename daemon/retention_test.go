package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/memwatch/memwatch/layout/nowhistory"
	"github.com/memwatch/memwatch/state"
)

// TestArchivesHeldCountsOnlyRootsWithArchives: status, which now opens
// only the roots the journal names an archive in, still counts the
// archive of the one root that has one, by the path the journal keeps.
func TestArchivesHeldCountsOnlyRootsWithArchives(t *testing.T) {
	base := t.TempDir()
	for _, r := range []string{"a", "b", "c"} {
		os.MkdirAll(filepath.Join(base, r), 0o755)
	}
	d, _ := testDaemon(t, fmt.Sprintf(`version: 1
stores:
  - name: apps
    layout: now-history
    paths: [%q]
    compactor: heuristic
    settle: 50ms
    cooldown: 200ms
    max_size: 2KiB
    keep_history: 2
`, filepath.Join(base, "*")))
	os.WriteFile(filepath.Join(base, "b", "memory.md"), memory(20, "v1"), 0o644)
	os.WriteFile(filepath.Join(base, "c", "memory.md"), memory(1, "small"), 0o644)
	rec := waitJournal(t, d, state.Filter{Root: filepath.Join(base, "b"), Rule: nowhistory.RuleCompact, Outcome: state.Done}, 10*time.Second)
	if rec.Archive == "" {
		t.Fatalf("the compaction names no archive: %+v", rec)
	}
	fi, err := os.Stat(filepath.Join(base, "b", rec.Archive))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	roots, err := d.watch.Roots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(roots["apps"]); got != 3 {
		t.Fatalf("roots of apps = %d, want 3", got)
	}
	h := d.archivesHeld(ctx, d.policy.Stores, roots)["apps"]
	if h.archives != 1 || h.bytes != fi.Size() {
		t.Errorf("archives held = %d (%d bytes), want 1 (%d bytes)", h.archives, h.bytes, fi.Size())
	}
}
