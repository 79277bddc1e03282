package transcripts

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestOpenWritesNothing: reading an agent's WAL database that its agent
// left with a -wal and a -shm (it is not running, or was killed) changes
// none of its files, the -shm included: not a byte, not a time.
func TestOpenWritesNothing(t *testing.T) {
	left := killedAgentDB(t, "-wal", "-shm")
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	before := map[string][]byte{}
	for _, ext := range []string{"", "-wal", "-shm"} {
		os.Chtimes(left+ext, past, past)
		before[ext], _ = os.ReadFile(left + ext)
	}
	db, err := Open(context.Background(), left)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM t").Scan(&n); err != nil || n != 2 {
		t.Errorf("read %d rows (%v), want 2 (the WAL's)", n, err)
	}
	db.Close()
	for _, ext := range []string{"", "-wal", "-shm"} {
		fi, err := os.Stat(left + ext)
		if err != nil {
			t.Errorf("agent.db%s: %v", ext, err)
			continue
		}
		b, _ := os.ReadFile(left + ext)
		if !fi.ModTime().Equal(past) || !bytes.Equal(b, before[ext]) {
			t.Errorf("agent.db%s changed by a read: mtime %v (was %v), %d bytes (were %d), same bytes %v", ext, fi.ModTime(), past, len(b), len(before[ext]), bytes.Equal(b, before[ext]))
		}
	}
}

// TestOpenReadsALiveWriter: with the agent running (its connection open,
// writing), a read-only reader that does not write the -shm still sees
// each committed row.
func TestOpenReadsALiveWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	w, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(wal)&_pragma=wal_autocheckpoint(4)")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.SetMaxOpenConns(1)
	if _, err := w.Exec("CREATE TABLE t(v TEXT)"); err != nil {
		t.Fatal(err)
	}
	db, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 1; i <= 200; i++ {
		if _, err := w.Exec("INSERT INTO t VALUES (?)", bytes.Repeat([]byte("x"), 3000)); err != nil {
			t.Fatal(err)
		}
		if i%20 != 0 {
			continue
		}
		// The reader waits at most 100 ms for a lock (as memwatch does, then
		// tries again on the next change): on a loaded machine, again.
		var n int
		err := db.QueryRow("SELECT count(*) FROM t").Scan(&n)
		for deadline := time.Now().Add(time.Minute); err != nil && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			err = db.QueryRow("SELECT count(*) FROM t").Scan(&n)
		}
		if err != nil || n != i {
			t.Fatalf("after %d rows committed, the reader read %d (%v)", i, n, err)
		}
	}
}

// TestOpenWithoutShm: a -wal left without its -shm (which SQLite cannot
// open read-only when it is not there) is still read, every row of it.
func TestOpenWithoutShm(t *testing.T) {
	left := killedAgentDB(t, "-wal")
	db, err := Open(context.Background(), left)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM t").Scan(&n); err != nil || n != 2 {
		t.Errorf("read %d rows (%v), want 2 (the WAL's)", n, err)
	}
}

// killedAgentDB is an agent's WAL database as the agent leaves it when
// killed: two rows in its -wal, and the files named by exts beside it
// (copied while its connection holds them open: closing it would
// checkpoint the WAL and delete them).
func killedAgentDB(t *testing.T, exts ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.db")
	w, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(wal)")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.SetMaxOpenConns(1)
	for _, q := range []string{"CREATE TABLE t(v TEXT)", "INSERT INTO t VALUES ('one'), ('two')"} {
		if _, err := w.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	left := filepath.Join(t.TempDir(), "agent.db")
	for _, ext := range append([]string{""}, exts...) {
		b, err := os.ReadFile(path + ext)
		if err != nil {
			t.Fatalf("the agent's %s: %v", ext, err)
		}
		if err := os.WriteFile(left+ext, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return left
}
