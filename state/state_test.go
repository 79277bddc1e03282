package state

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestDurationUnderAMillisecond: a journal record keeps a sub-millisecond
// duration (most rewrites take less than a millisecond), and a database
// from before the duration_us column is upgraded in place.
func TestDurationUnderAMillisecond(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// A journal as older memwatch versions made it, with one record.
	old, err := sql.Open("sqlite", "file:"+filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(`CREATE TABLE journal (id INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL, store TEXT NOT NULL, root TEXT NOT NULL,
		rule TEXT NOT NULL, target TEXT NOT NULL, archive TEXT NOT NULL DEFAULT '', before_sha TEXT NOT NULL DEFAULT '', before_size INTEGER NOT NULL DEFAULT 0,
		after_sha TEXT NOT NULL DEFAULT '', after_size INTEGER NOT NULL DEFAULT 0, tokens INTEGER NOT NULL DEFAULT 0, duration_ms INTEGER NOT NULL DEFAULT 0,
		outcome TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', data BLOB);
		INSERT INTO journal(time,store,root,rule,target,duration_ms,outcome) VALUES (1, 's', '/r', 'compact', 'memory.md', 7, 'done')`); err != nil {
		t.Fatal(err)
	}
	old.Close()
	db, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Append(ctx, &Record{Store: "s", Root: "/r", Rule: "compact", Target: "memory.md", Outcome: Done, Duration: 250 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	recs, err := db.Journal(ctx, Filter{})
	if err != nil || len(recs) != 2 {
		t.Fatalf("journal: %v, %v", recs, err)
	}
	if got, want := recs[0].Duration, 250*time.Microsecond; got != want {
		t.Errorf("new record: duration %v, want %v", got, want)
	}
	if got, want := recs[1].Duration, 7*time.Millisecond; got != want {
		t.Errorf("old record: duration %v, want %v", got, want)
	}
}

func TestTokenAndDiskDays(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	for _, u := range []struct {
		ep, day string
		n       int64
	}{{"a", "2026-11-01", 5}, {"a", "2026-11-01", 7}, {"b", "2026-11-02", 3}, {"a", "2026-10-31", 100}} {
		if _, err := db.AddTokens(ctx, u.ep, u.day, u.n); err != nil {
			t.Fatal(err)
		}
	}
	days, err := db.TokenDays(ctx, "2026-11-01")
	if err != nil {
		t.Fatal(err)
	}
	if want := []TokenDay{{"a", "2026-11-01", 12}, {"b", "2026-11-02", 3}}; fmt.Sprint(days) != fmt.Sprint(want) {
		t.Errorf("TokenDays: got %v, want %v", days, want)
	}
	if err := db.PutDisk(ctx, []DiskSample{{Day: "2026-11-01", Store: "s", Kind: "archives", Bytes: 10}, {Day: "2026-11-01", Kind: "journal", Bytes: 4}}); err != nil {
		t.Fatal(err)
	}
	// A later reading of the same day replaces the earlier one.
	if err := db.PutDisk(ctx, []DiskSample{{Day: "2026-11-01", Store: "s", Kind: "archives", Bytes: 30}}); err != nil {
		t.Fatal(err)
	}
	got, err := db.DiskDays(ctx, "2026-01-01")
	if err != nil {
		t.Fatal(err)
	}
	if want := []DiskSample{{"2026-11-01", "", "journal", 4}, {"2026-11-01", "s", "archives", 30}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("DiskDays: got %v, want %v", got, want)
	}
}

func TestJournalPagesBeforeAnID(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	for i := range 5 {
		if _, err := db.Append(ctx, &Record{Store: "s", Root: "/r", Rule: "compact", Target: fmt.Sprint(i), Outcome: Done}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := db.Journal(ctx, Filter{Root: "/r", BeforeID: 4, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].ID != 3 || recs[1].ID != 2 {
		t.Errorf("the page before record 4: got %v, want records 3 and 2", recs)
	}
	latest, err := db.Latest(ctx, "s")
	if err != nil || len(latest) != 1 || latest[0].ID != 5 {
		t.Errorf("Latest: got %v, %v; want record 5", latest, err)
	}
}

// TestBindingsCheck: a table whose rows are all under their directory's
// key binds nothing (no UPDATE a root), one with a bare path or an
// unbound key binds as before, and so does one UnbindRoots just wrote.
func TestBindingsCheck(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE logs(root TEXT, path TEXT)`); err != nil {
		t.Fatal(err)
	}
	bound := "/home/a/p\x0012:34:1000"
	for _, tc := range []struct {
		name string
		keys []string
		want bool // a Bind runs
	}{
		{"empty", nil, false},
		{"all bound", []string{bound}, false},
		{"a bare path", []string{bound, "/home/a/q"}, true},
		{"an unbound key", []string{bound, "/home/a/q\x000:0:1000"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db.Exec(`DELETE FROM logs`)
			for _, k := range tc.keys {
				db.Exec(`INSERT INTO logs VALUES(?, 'x')`, k)
			}
			var b Bindings
			if err := b.Check(ctx, db, "logs"); err != nil {
				t.Fatal(err)
			}
			ran := false
			b.Once("k", func() error { ran = true; return nil })
			if ran != tc.want {
				t.Errorf("bind ran: got %v, want %v", ran, tc.want)
			}
			b.Unbound()
			ran = false
			b.Once("k2", func() error { ran = true; return nil })
			if !ran {
				t.Error("after Unbound, bind did not run")
			}
		})
	}
	var b Bindings
	if err := b.Check(ctx, db, "no_such_table"); err == nil {
		t.Error("Check of a missing table: no error")
	}
}

// TestArchiveRoots: the roots with a record that names an archive, and
// only those (status opens no other root to count its archives).
func TestArchiveRoots(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	for _, r := range []Record{
		{Store: "s", Root: "/a", Rule: "compact", Target: "memory.md", Archive: "memory.archive/1.md", Outcome: Done},
		{Store: "s", Root: "/a", Rule: "compact", Target: "memory.md", Archive: "memory.archive/2.md", Outcome: Done},
		{Store: "s", Root: "/b", Rule: "evaluate", Target: "memory.md", Outcome: Done},
		{Store: "t", Root: "/c", Rule: "rotate", Target: "log.md", Archive: "log.archive/1.md", Outcome: Failed},
	} {
		if _, err := db.Append(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.ArchiveRoots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"/a": true, "/c": true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ArchiveRoots = %v, want %v", got, want)
	}
}

// TestArchiveRecords: the records whose archive no done prune removed,
// under its name or its compressed one, newest first, each with its
// done compression; other roots', prunes' and compressions' records are
// not archives.
func TestArchiveRecords(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	for _, r := range []Record{
		{Root: "/a", Rule: "compact", Target: "m.md", Archive: "arc/1.md", Outcome: Done},                      // 1: compressed, then pruned
		{Root: "/a", Rule: "compact", Target: "m.md", Archive: "arc/2.md", Outcome: Done},                      // 2: compressed
		{Root: "/a", Rule: "compact", Target: "m.md", Archive: "arc/3.md", Outcome: Done},                      // 3: pruned as it was
		{Root: "/a", Rule: "compact", Target: "m.md", Archive: "arc/4.md", Outcome: Done},                      // 4: a failed compression, a failed prune
		{Root: "/b", Rule: "compact", Target: "m.md", Archive: "arc/5.md", Outcome: Done},                      // 5: another root
		{Root: "/a", Rule: "zip", Target: "arc/1.md", Archive: "arc/1.md.gz", AfterSHA: "z1", Outcome: Done},   // 6
		{Root: "/a", Rule: "zip", Target: "arc/2.md", Archive: "arc/2.md.gz", AfterSHA: "z2", Outcome: Done},   // 7
		{Root: "/a", Rule: "prune", Target: "arc/1.md.gz", Outcome: Done},                                      // 8
		{Root: "/a", Rule: "prune", Target: "arc/3.md", Outcome: Done},                                         // 9
		{Root: "/a", Rule: "zip", Target: "arc/4.md", Archive: "arc/4.md.gz", AfterSHA: "z4", Outcome: Failed}, // 10
		{Root: "/a", Rule: "prune", Target: "arc/4.md", Outcome: Failed},                                       // 11
		{Root: "/a", Rule: "prune", Target: "arc/2.md", Outcome: Done},                                         // 12: its old name, not the file now
		{Root: "/b", Rule: "prune", Target: "arc/2.md.gz", Outcome: Done},                                      // 13: another root's
		{Root: "/a", Rule: "kept", Target: "m.md", Archive: "m.md.kept", Outcome: Done},                        // 14
	} {
		if _, err := db.Append(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.ArchiveRecords(ctx, "/a", "zip", "prune")
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, a := range got {
		desc = append(desc, fmt.Sprintf("%d %s>%s %s", a.ID, a.Archive, a.CompressedTo, a.CompressedSHA))
	}
	want := []string{"14 m.md.kept> ", "4 arc/4.md> ", "2 arc/2.md>arc/2.md.gz z2"}
	if fmt.Sprint(desc) != fmt.Sprint(want) {
		t.Errorf("ArchiveRecords = %q, want %q", desc, want)
	}
}

// openTemp opens a state database in a temporary directory, closed with
// the test.
func openTemp(t *testing.T) *DB {
	t.Helper()
	db, err := Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
