package spool

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/memwatch/memwatch/confine"
)

// TestLogsBelongToTheirDirectory: what was captured from one directory is
// not found, held or shown for another that takes its path, and comes
// back when the first one does; logs kept before roots had IDs, and those
// of a restored state, go to the first directory of their path (with the
// same owner for the latter).
func TestLogsBelongToTheirDirectory(t *testing.T) {
	ctx := context.Background()
	s := newSpool(t)
	base := t.TempDir()
	dir := filepath.Join(base, "p1")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(lines(msgs(1, 3)...)), 0o644)
	a := openRoot(t, dir)
	if _, err := s.Capture(ctx, a, "s.jsonl", opts); err != nil {
		t.Fatal(err)
	}
	os.Truncate(filepath.Join(dir, "s.jsonl"), 0) // cleared: its lines are held
	if _, err := s.Capture(ctx, a, "s.jsonl", opts); err != nil {
		t.Fatal(err)
	}
	held := func(r *confine.Root) int {
		n := 0
		s.SearchHeld(ctx, r, func(string, int64, int64, []byte) error { n++; return nil })
		return n
	}
	if n := held(a); n != 3 {
		t.Fatalf("held in the first directory: %d, want 3", n)
	}
	// Another directory takes the path.
	os.Rename(dir, dir+".old")
	os.MkdirAll(dir, 0o755)
	b := openRoot(t, dir)
	if a.ID().SameDir(b.ID()) {
		t.Fatal("the new directory has the old one's inode")
	}
	if _, ok, _ := s.Find(ctx, b.ID(), "s.jsonl"); ok {
		t.Error("the new directory finds the old one's log")
	}
	if n := held(b); n != 0 {
		t.Errorf("the new directory holds %d of the old one's lines", n)
	}
	if _, err := s.Show(ctx, b, Citation{Path: "s.jsonl", Gen: 1, From: 1, To: 3}); err == nil {
		t.Error("Show cited the old directory's lines in the new one")
	}
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(lines(msg(9))), 0o644)
	if res, err := s.Capture(ctx, b, "s.jsonl", opts); err != nil || res.Why != "new" {
		t.Errorf("capture in the new directory: %+v %v, want a new log", res, err)
	}
	// The old directory comes back: its lines with it.
	os.RemoveAll(dir)
	os.Rename(dir+".old", dir)
	c := openRoot(t, dir)
	if n := held(c); n != 3 {
		t.Errorf("the old directory back: %d held, want 3", n)
	}

	// Logs keyed by the bare path (before IDs): the first directory takes them.
	if _, err := s.db.ExecContext(ctx, `UPDATE logs SET root=? WHERE root=?`, dir, c.ID().Key()); err != nil {
		t.Fatal(err)
	}
	if n := held(c); n != 0 {
		t.Fatalf("a bare-path log found before Bind: %d", n)
	}
	s2 := &Spool{db: s.db, path: s.path, Now: s.Now, locks: s.locks, held: map[string]*heldLog{}, matching: map[int64]bool{}, stmts: s.stmts}
	s2.Bind(ctx, c.ID())
	if n := held(c); n != 3 {
		t.Errorf("after Bind: %d held, want 3", n)
	}
	// A restored state: unbound, then taken by a directory of the same
	// owner, not by one of another's.
	if n, err := s.Unbind(ctx); err != nil || n < 1 {
		t.Fatalf("Unbind: %d %v", n, err)
	}
	other := c.ID()
	other.UID++
	s3 := &Spool{db: s.db, path: s.path, Now: s.Now, locks: s.locks, held: map[string]*heldLog{}, matching: map[int64]bool{}, stmts: s.stmts}
	s3.Bind(ctx, other)
	if logs, _ := s.Logs(ctx, other); len(logs) != 0 {
		t.Errorf("a directory of another owner took %d restored logs", len(logs))
	}
	s3.Bind(ctx, c.ID())
	if n := held(c); n != 3 {
		t.Errorf("the same owner's directory after a restore: %d held, want 3", n)
	}
}

// TestOpenFindsBareKeys: a spool written before roots had IDs is opened
// as a spool (Open looks for such rows): its first directory at the path
// takes its logs, though a spool with none binds nothing.
func TestOpenFindsBareKeys(t *testing.T) {
	ctx := context.Background()
	state := t.TempDir()
	s, err := Open(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "p")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(lines(msgs(1, 3)...)), 0o644)
	r := openRoot(t, dir)
	if _, err := s.Capture(ctx, r, "s.jsonl", opts); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE logs SET root=? WHERE root=?`, dir, r.ID().Key()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok, _ := s.Find(ctx, r.ID(), "s.jsonl"); ok {
		t.Fatal("a bare-path log found before Bind")
	}
	if !s.Bind(ctx, r.ID()) {
		t.Fatal("Bind did not run on a spool holding a bare path")
	}
	if _, ok, err := s.Find(ctx, r.ID(), "s.jsonl"); !ok || err != nil {
		t.Errorf("after Bind: the log not found (%v)", err)
	}
}
