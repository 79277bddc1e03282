package rotate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/rotate"
	"github.com/memwatch/memwatch/state"
)

// day is the content of memory.md on day i, before the compaction.
func day(i int) string {
	return fmt.Sprintf("# now\n## State | day %d\n%s", i, strings.Repeat(fmt.Sprintf("- history of day %d\n", i), 400))
}

// TestAYearOfDailyCompactions runs a year of daily compactions under a fake
// clock with archive_keep 30 and compress_after 7 days: 30 archives stay
// beyond the newest, those older than a week are gzip, every removal and
// compression is journaled, an undo of a pruned pre-image says so, and an
// undo of a compressed one restores it.
func TestAYearOfDailyCompactions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := state.Open(ctx, filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rootDir := filepath.Join(dir, "app")
	os.MkdirAll(rootDir, 0o755)
	root, err := confine.Open(rootDir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	rw := rewrite.New(db, slog.New(slog.DiscardHandler))
	rw.Settle, rw.MaxSettle = time.Millisecond, 5*time.Millisecond
	start := time.Date(2025, 1, 1, 3, 0, 0, 0, time.UTC)
	ret := rotate.Retention{Keep: 30, CompressAfter: 7 * 24 * time.Hour}
	var ids []int64
	var held []int64 // archive bytes at the end of each day
	for i := 0; i < 365; i++ {
		now := start.Add(time.Duration(i) * 24 * time.Hour)
		rw.Now = func() time.Time { return now }
		os.WriteFile(filepath.Join(rootDir, "memory.md"), []byte(day(i)), 0o644)
		out, err := rw.Apply(ctx, rewrite.Request{Root: root, Target: "memory.md", Archive: "memory/" + now.Format("2006-01-02-1504") + ".md",
			Compute: func(context.Context, []byte) ([]byte, error) {
				return []byte(fmt.Sprintf("# now\n## State | day %d\n", i)), nil
			}},
			&state.Record{Store: "apps", Rule: "compact", Time: now})
		if err != nil || out.Archive == "" {
			t.Fatalf("day %d: %+v %v", i, out, err)
		}
		ids = append(ids, out.Record)
		as, err := rotate.Archives(ctx, db, root)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rotate.Apply(ctx, db, root, "apps", rotate.Plan(as, ret, now), false); err != nil {
			t.Fatalf("day %d: retention: %v", i, err)
		}
		as, _ = rotate.Archives(ctx, db, root)
		_, b := rotate.Held(as)
		held = append(held, b)
	}
	as, _ := rotate.Archives(ctx, db, root)
	if len(as) != 31 {
		t.Errorf("archives after a year: %d, want 31 (30 + the newest)", len(as))
	}
	compressed := 0
	for _, a := range as {
		if a.Compressed {
			compressed++
			if !strings.HasSuffix(a.Path, ".gz") {
				t.Errorf("compressed archive %s has no .gz", a.Path)
			}
		}
	}
	if compressed != 31-8 {
		t.Errorf("compressed archives: %d, want %d (all but the last week's)", compressed, 31-8)
	}
	on, _ := filepath.Glob(filepath.Join(rootDir, "memory", "*"))
	if len(on) != 31 {
		t.Errorf("files in memory/: %d, want 31", len(on))
	}
	t.Logf("archive bytes held: day 30 %d, day 364 %d; a year with no retention would hold about %d", held[30], held[364], int64(len(day(200)))*365)
	prunes, _ := db.Journal(ctx, state.Filter{Rule: rotate.RulePrune})
	if len(prunes) != 365-31 {
		t.Errorf("journaled prunes: %d, want %d", len(prunes), 365-31)
	}
	// The first day's pre-image was pruned: the undo says so.
	if _, err := rw.Undo(ctx, ids[0], true); !errors.Is(err, rewrite.ErrPruned) || !strings.Contains(err.Error(), "archive_keep 30") {
		t.Errorf("undo of a pruned pre-image: %v, want ErrPruned naming the retention", err)
	}
	// Day 350's is compressed: the undo reads the .gz.
	os.WriteFile(filepath.Join(rootDir, "memory.md"), []byte("# now\n## State | day 350\n"), 0o644)
	if _, err := rw.Undo(ctx, ids[350], true); err != nil {
		t.Fatalf("undo of a compressed pre-image: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(rootDir, "memory.md")); string(b) != day(350) {
		t.Errorf("after the undo memory.md holds %d bytes, want day 350's %d", len(b), len(day(350)))
	}
}

func TestPlanNeverRemovesTheNewest(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	as := []rotate.Archive{
		{Path: "memory/a3.md", Target: "memory.md", Time: now.Add(-1 * time.Hour), Size: 100},
		{Path: "HISTORY-old.md", Target: "HISTORY.md", Time: now.Add(-400 * 24 * time.Hour), Size: 5000},
		{Path: "memory/a2.md", Target: "memory.md", Time: now.Add(-48 * time.Hour), Size: 100},
		{Path: "memory/a1.md", Target: "memory.md", Time: now.Add(-72 * time.Hour), Size: 100},
	}
	tests := []struct {
		name string
		r    rotate.Retention
		want []string // removed
	}{
		{"keep 1", rotate.Retention{Keep: 1}, []string{"memory/a1.md"}},
		{"max age a day", rotate.Retention{MaxAge: 24 * time.Hour}, []string{"memory/a2.md", "memory/a1.md"}},
		{"max bytes under the newest", rotate.Retention{MaxBytes: 10}, []string{"memory/a1.md", "memory/a2.md"}},
		{"nothing set", rotate.Retention{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range rotate.Plan(as, tt.r, now) {
				if a.Op == rotate.RulePrune {
					got = append(got, a.Archive.Path)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("removed %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRetentionLeavesAChangedArchiveAlone: an archive whose content is no
// longer what memwatch wrote is neither removed nor compressed.
func TestRetentionLeavesAChangedArchiveAlone(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := state.Open(ctx, filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rootDir := filepath.Join(dir, "app")
	os.MkdirAll(rootDir, 0o755)
	root, err := confine.Open(rootDir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	rw := rewrite.New(db, slog.New(slog.DiscardHandler))
	var archives []string
	for i := range 3 {
		os.WriteFile(filepath.Join(rootDir, "memory.md"), []byte(day(i)), 0o644)
		out, err := rw.Apply(ctx, rewrite.Request{Root: root, Target: "memory.md", Archive: fmt.Sprintf("memory/a%d.md", i),
			Compute: func(context.Context, []byte) ([]byte, error) { return []byte("small\n"), nil }}, &state.Record{Rule: "compact"})
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, out.Archive)
	}
	// Someone writes into the oldest archive.
	os.WriteFile(filepath.Join(rootDir, archives[0]), []byte("the agent's own notes\n"), 0o644)
	as, _ := rotate.Archives(ctx, db, root)
	_, err = rotate.Apply(ctx, db, root, "apps", rotate.Plan(as, rotate.Retention{Keep: 1}, time.Now()), false)
	if !errors.Is(err, rotate.ErrNotOurs) {
		t.Errorf("retention of a changed archive: %v, want ErrNotOurs", err)
	}
	if b, _ := os.ReadFile(filepath.Join(rootDir, archives[0])); string(b) != "the agent's own notes\n" {
		t.Errorf("the changed archive was touched: %q", b)
	}
}
