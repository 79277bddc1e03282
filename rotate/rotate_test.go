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
// yearSim is a year of daily compactions of one memory.md under archive
// retention (keep 30, compress after 7 days) and the journal retention jr,
// applied every day as the daemon does.
type yearSim struct {
	db      *state.DB
	rw      *rewrite.Rewriter
	root    *confine.Root
	rootDir string
	ids     []int64 // each day's compaction record
	held    []int64 // archive bytes at the end of each day
	journal []int64 // the journal's estimated bytes at the end of each day
}

func simulateYear(t testing.TB, jr rotate.JournalRetention) *yearSim {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := state.Open(ctx, filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rootDir := filepath.Join(dir, "app")
	os.MkdirAll(rootDir, 0o755)
	root, err := confine.Open(rootDir, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	rw := rewrite.New(db, slog.New(slog.DiscardHandler))
	rw.Settle, rw.MaxSettle = time.Millisecond, 5*time.Millisecond
	start := time.Date(2025, 1, 1, 3, 0, 0, 0, time.UTC)
	ret := rotate.Retention{Keep: 30, CompressAfter: 7 * 24 * time.Hour}
	y := &yearSim{db: db, rw: rw, root: root, rootDir: rootDir}
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
		y.ids = append(y.ids, out.Record)
		// A note a day besides (a rule deciding there is nothing to do).
		db.Append(ctx, &state.Record{Time: now, Store: "apps", Root: rootDir, Rule: "compact", Target: "memory.md", Outcome: state.Skipped, Reason: fmt.Sprintf("note of day %d", i)})
		as, err := rotate.Archives(ctx, db, root)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rotate.Apply(ctx, db, root, "apps", rotate.Plan(as, ret, now), false); err != nil {
			t.Fatalf("day %d: retention: %v", i, err)
		}
		if _, err := rotate.PruneJournal(ctx, db, jr, now, false); err != nil {
			t.Fatalf("day %d: journal retention: %v", i, err)
		}
		var b, jb int64
		if i%30 == 0 || i == 364 { // what the test looks at: a full read of the journal costs
			as, _ = rotate.Archives(ctx, db, root)
			_, b, _ = rotate.Held(as)
			es, _ := db.Entries(ctx)
			for _, e := range es {
				jb += e.Bytes
			}
		}
		y.held = append(y.held, b)
		y.journal = append(y.journal, jb)
	}
	return y
}

func TestAYearOfDailyCompactions(t *testing.T) {
	ctx := context.Background()
	y := simulateYear(t, rotate.JournalRetention{})
	db, rw, root, rootDir, ids, held := y.db, y.rw, y.root, y.rootDir, y.ids, y.held
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

// TestJournalRetentionOverAYear: with journal_max_age 60d the journal stays
// bounded, keeps every record an existing archive needs (so archive
// retention still finds all 31) and the newest of each file, and an undo
// of a pruned record says so.
func TestJournalRetentionOverAYear(t *testing.T) {
	ctx := context.Background()
	y := simulateYear(t, rotate.JournalRetention{MaxAge: 60 * 24 * time.Hour})
	if as, _ := rotate.Archives(ctx, y.db, y.root); len(as) != 31 {
		t.Errorf("archives the journal still knows: %d, want 31", len(as))
	}
	// Without retention the journal grows by the same records every day;
	// with it, it stops growing once the oldest records are past the age.
	if y.journal[364] > y.journal[120]*11/10 {
		t.Errorf("journal grew from %d bytes (day 120) to %d (day 364): not bounded", y.journal[120], y.journal[364])
	}
	es, _ := y.db.Entries(ctx)
	// Three records a day for 61 days (a compaction, a note, a prune), and
	// the 31 archives' compactions and compressions.
	if want := 3*61 + 2*31 + 2; len(es) > want {
		t.Errorf("journal records after a year: %d, want at most %d", len(es), want)
	}
	t.Logf("journal after a year with journal_max_age 60d: %d records, %d bytes (day 120: %d bytes; without retention it grows by about %d bytes a month)",
		len(es), y.journal[364], y.journal[120], (y.journal[120]-y.journal[30])/3)
	if _, err := y.rw.Undo(ctx, y.ids[10], true); !errors.Is(err, state.ErrPrunedRecord) || !strings.Contains(err.Error(), "pruned by journal retention") {
		t.Errorf("undo of a pruned journal record: %v, want ErrPrunedRecord", err)
	}
	// The newest compaction is undoable.
	if _, err := y.rw.Undo(ctx, y.ids[364], true); err != nil {
		t.Errorf("undo of the newest compaction: %v", err)
	}
	// Bytes bound: the oldest removable records go until the journal is
	// under it, or every removable record is gone.
	es, _ = y.db.Entries(ctx)
	var total int64
	for _, e := range es {
		total += e.Bytes
	}
	ids, res := rotate.PlanJournal(es, rotate.JournalRetention{MaxBytes: total / 2}, time.Now())
	all, _ := rotate.PlanJournal(es, rotate.JournalRetention{MaxAge: time.Nanosecond}, time.Now().Add(time.Hour))
	if res.Held > total/2 && len(ids) != len(all) {
		t.Errorf("journal_max_bytes %d: %d bytes held after removing %d records, while %d were removable", total/2, res.Held, len(ids), len(all))
	}
}

// TestPlanJournalKeepsWhatIsNeeded: the newest record of each file, a
// pending record, a row rule's records and the records of archives still
// on disk, each at the age limit.
func TestPlanJournalKeepsWhatIsNeeded(t *testing.T) {
	old := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := old.Add(365 * 24 * time.Hour)
	es := []state.Entry{
		{ID: 1, Time: old, Root: "/r", Rule: "compact", Target: "m.md", Outcome: state.Done, Archive: "memory/a1.md", Bytes: 100},
		{ID: 2, Time: old, Root: "/r", Rule: "compact", Target: "m.md", Outcome: state.Done, Archive: "memory/a2.md", Bytes: 100},
		{ID: 3, Time: old, Root: "/r", Rule: rotate.RulePrune, Target: "memory/a1.md", Outcome: state.Done, Bytes: 100},
		{ID: 4, Time: old, Root: "/r", Rule: "compact", Target: "m.md", Outcome: state.Skipped, Bytes: 100},
		{ID: 5, Time: old, Root: "/r", Rule: "compact", Target: "m.md", Outcome: state.Pending, Bytes: 100},
		{ID: 6, Time: old, Root: "/r", Rule: "record-delete", Target: "t/app/1", Outcome: state.Done, Bytes: 100},
		{ID: 7, Time: old, Root: "/r", Rule: "mirror", Target: "H.md", Outcome: state.Done, Bytes: 100},
		{ID: 8, Time: old, Root: "/r", Rule: "mirror", Target: "H.md", Outcome: state.Done, Bytes: 100},
		{ID: 9, Time: now, Root: "/r", Rule: "mirror", Target: "H.md", Outcome: state.Skipped, Bytes: 100},
	}
	ids, _ := rotate.PlanJournal(es, rotate.JournalRetention{MaxAge: 24 * time.Hour, RowRule: func(r string) bool { return r == "record-delete" }}, now)
	// 1: its archive was pruned; 3: the prune; 4: a skipped note older than the newest (5 is newer);
	// 6: a row rule's; 7: not the newest of H.md. Kept: 2 (archive on disk, newest done of m.md),
	// 5 (pending), 8 (newest done of H.md), 9 (young, newest).
	want := []int64{1, 3, 4, 6, 7}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("removed %v, want %v", ids, want)
	}
}

// BenchmarkAYearOfRetention reports the disk memwatch holds after a
// simulated year of daily compactions of one 8 KB memory file: archive
// bytes with retention (archive_keep 30, compress_after 7d) against the
// bytes every archive would hold without it, and the journal's bytes with
// journal_max_age 60d.
func BenchmarkAYearOfRetention(b *testing.B) {
	var without int64
	for i := 0; i < 365; i++ {
		without += int64(len(day(i)))
	}
	for b.Loop() {
		y := simulateYear(b, rotate.JournalRetention{MaxAge: 60 * 24 * time.Hour})
		b.ReportMetric(float64(y.held[364]), "archive-bytes-kept")
		b.ReportMetric(float64(without), "archive-bytes-without-retention")
		b.ReportMetric(float64(y.journal[364]), "journal-bytes-kept")
	}
}
