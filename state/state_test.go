package state

import (
	"context"
	"database/sql"
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
